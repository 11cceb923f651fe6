"""The canary's PromQL: one revision's numbers over one analysis window, from SGLang's series.

Scrape assumption (documented in radixfleet/controllers/canary/README.md): KServe serverless pods
carry the Knative label `serving.knative.dev/revision`; the Prometheus scrape of SGLang replicas
relabels it to a `revision` label (and the pod's namespace to `namespace`):

    - source_labels: [__meta_kubernetes_pod_label_serving_knative_dev_revision]
      target_label: revision
    - source_labels: [__meta_kubernetes_namespace]
      target_label: namespace
    - source_labels: [__meta_kubernetes_pod_label_radixfleet_io_pool]
      target_label: pool

A revision's numbers are those of its replicas outside a canary's baseline (`pool!="baseline"`,
which series without the label match too); the baseline's are the stable revision's with
`pool="baseline"`.

The label names are settings (`QueryConfig`), so another relabeling only changes config.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixfleet.controllers.canary.spec import Metric
from radixfleet.labels import BASELINE_POOL

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
    pool_label: str = "pool"
    endpoints: str = "/generate|/v1/completions|/v1/chat/completions"
    quantile: float = 0.95


def selector(*, namespace: str, revision: str, config: QueryConfig, baseline: bool) -> str:
    """The label matchers of a revision's replicas: those of its baseline, or all but them."""
    pool = f"{config.pool_label}{'=' if baseline else '!='}{_quote(BASELINE_POOL)}"
    ns, rev = config.namespace_label, config.revision_label
    return f"{ns}={_quote(namespace)},{rev}={_quote(revision)},{pool}"


def revision_queries(
    *,
    namespace: str,
    revision: str,
    window_seconds: int,
    config: QueryConfig,
    baseline: bool = False,
) -> dict[str, str]:
    """PromQL for requests and every metric a check can judge, keyed by `requests` or Metric."""
    sel = selector(namespace=namespace, revision=revision, config=config, baseline=baseline)
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
    *,
    namespace: str,
    revision: str,
    window_seconds: int,
    config: QueryConfig,
    baseline: bool = False,
) -> dict[str, str]:
    """PromQL for the window's latency histograms (one series per `le`), keyed by Metric: what
    the judge's significance test reads."""
    sel = selector(namespace=namespace, revision=revision, config=config, baseline=baseline)
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
