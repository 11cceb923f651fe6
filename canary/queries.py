"""The canary's PromQL: one revision's numbers over one analysis window, from SGLang's series.

Scrape assumption (documented in canary/README.md): KServe serverless pods carry the Knative
label `serving.knative.dev/revision`; the Prometheus scrape of SGLang replicas relabels it to a
`revision` label (and the pod's namespace to `namespace`):

    - source_labels: [__meta_kubernetes_pod_label_serving_knative_dev_revision]
      target_label: revision
    - source_labels: [__meta_kubernetes_namespace]
      target_label: namespace

The label names are settings (`QueryConfig`), so another relabeling only changes config.
"""

from __future__ import annotations

from dataclasses import dataclass

from canary.spec import Metric

TTFT_BUCKETS = "sglang:time_to_first_token_seconds_bucket"
ITL_BUCKETS = "sglang:inter_token_latency_seconds_bucket"
RESPONSES = "sglang:http_responses_total"
CACHED_TOKENS = "sglang:cached_tokens_total"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
REQUESTS = "requests"


@dataclass(frozen=True)
class QueryConfig:
    """Label names and the generation endpoints whose responses count as requests.

    Health checks and /metrics scrapes also go through SGLang's HTTP middleware; counting
    them would dilute the error rate, so only generation endpoints count.
    """

    revision_label: str = "revision"
    namespace_label: str = "namespace"
    endpoints: str = "/generate|/v1/completions|/v1/chat/completions"
    quantile: float = 0.95


def revision_queries(
    *, namespace: str, revision: str, window_seconds: int, config: QueryConfig
) -> dict[str, str]:
    """PromQL for requests and every metric a check can judge, keyed by `requests` or Metric."""
    sel = f"{config.namespace_label}={_quote(namespace)},{config.revision_label}={_quote(revision)}"
    win = f"[{window_seconds}s]"
    gen = f"{sel},endpoint=~{_quote(config.endpoints)}"
    responses = f"sum(increase({RESPONSES}{{{gen}}}{win}))"
    # `or vector(0)`: a revision that never failed has no 5xx series at all, which is 0 errors,
    # not missing data; a revision without responses still divides by nothing and stays empty.
    errors = f'(sum(increase({RESPONSES}{{{gen},status_code=~"5.."}}{win})) or vector(0))'
    cached = f"(sum(rate({CACHED_TOKENS}{{{sel}}}{win})) or vector(0))"
    return {
        REQUESTS: responses,
        Metric.TTFT_P95: _quantile(config.quantile, TTFT_BUCKETS, sel, win),
        Metric.ITL_P95: _quantile(config.quantile, ITL_BUCKETS, sel, win),
        Metric.ERROR_RATE: f"{errors} / {responses}",
        Metric.CACHE_HIT_RATE: f"{cached} / sum(rate({PROMPT_TOKENS}{{{sel}}}{win}))",
    }


def histogram_queries(
    *, namespace: str, revision: str, window_seconds: int, config: QueryConfig
) -> dict[str, str]:
    """PromQL for the window's latency histograms (one series per `le`), keyed by Metric: what
    the judge's significance test reads."""
    sel = f"{config.namespace_label}={_quote(namespace)},{config.revision_label}={_quote(revision)}"
    win = f"[{window_seconds}s]"
    return {
        metric: f"sum by (le) (increase({buckets}{{{sel}}}{win}))"
        for metric, buckets in ((Metric.TTFT_P95, TTFT_BUCKETS), (Metric.ITL_P95, ITL_BUCKETS))
    }


def _quantile(q: float, buckets: str, sel: str, win: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({buckets}{{{sel}}}{win})))"


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
