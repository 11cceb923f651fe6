"""The autoscaler's PromQL: one revision's replicas, gauge by gauge, and its model-wide rates.

Scrape assumption (the canary's, plus the pod name; see radixfleet/controllers/autoscale/README.md):
the Prometheus scrape of SGLang pods relabels the Knative revision label, the namespace and the pod
name onto every series:

    - source_labels: [__meta_kubernetes_pod_label_serving_knative_dev_revision]
      target_label: revision
    - source_labels: [__meta_kubernetes_namespace]
      target_label: namespace
    - source_labels: [__meta_kubernetes_pod_name]
      target_label: pod

Gauges are read per pod (`max by (pod)`: a tensor-parallel replica exports one series per
rank); counters and histograms over `window_seconds`. The label names are settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixfleet import metrics_names as m

# ReplicaMetrics field -> SGLang gauge read per pod.
POD_GAUGES = {
    "running": m.SGLANG_RUNNING,
    "queued": m.SGLANG_QUEUE,
    "kv_usage": m.SGLANG_TOKEN_USAGE,
    "gen_throughput": m.SGLANG_GEN_THROUGHPUT,
    "hit_rate": m.SGLANG_CACHE_HIT_RATE,
}
# The gauges without which a replica cannot be judged; the others are optional.
REQUIRED = ("running", "queued", "kv_usage")


@dataclass(frozen=True)
class QueryConfig:
    """Label names, windows, and the optional query for requests held upstream.

    `waiting` is PromQL with `$namespace` and `$revision` placeholders (replaced by quoted
    label values) for the requests
    Knative's activator holds for the revision (its metric names changed across Knative
    releases, so it is a setting); None leaves `waiting` unmeasured, and the KPA keeps
    waking the model from zero on its own.
    """

    namespace_label: str = "namespace"
    revision_label: str = "revision"
    pod_label: str = "pod"
    window_seconds: int = 60
    quantile: float = 0.95
    waiting: str | None = None


def selector(namespace: str, revision: str, config: QueryConfig) -> str:
    """The label matchers of one revision's series."""
    return (
        f"{config.namespace_label}={_quote(namespace)},{config.revision_label}={_quote(revision)}"
    )


def pod_queries(*, namespace: str, revision: str, config: QueryConfig) -> dict[str, str]:
    """PromQL per ReplicaMetrics field, each answering one sample per pod."""
    sel, pod = selector(namespace, revision, config), config.pod_label
    queries = {field: f"max by ({pod}) ({name}{{{sel}}})" for field, name in POD_GAUGES.items()}
    window = f"[{config.window_seconds}s]"
    queries["cached_tokens_rate"] = (
        f"sum by ({pod}) (rate({m.SGLANG_CACHED_TOKENS}{{{sel}}}{window}))"
    )
    return queries


def model_queries(*, namespace: str, revision: str, config: QueryConfig) -> dict[str, str]:
    """PromQL for the revision's arrival rate, latency p95s and (if set) waiting requests.

    The arrival rate is read as completions per second (`sglang:num_requests_total`): equal to
    arrivals in a steady state and behind them in a burst, which the queue gauges cover.
    """
    sel, window = selector(namespace, revision, config), f"[{config.window_seconds}s]"
    queries = {
        "arrival_rate": f"sum(rate({m.SGLANG_REQUESTS}{{{sel}}}{window}))",
        "ttft_p95": _quantile(config.quantile, f"{m.SGLANG_TTFT}_bucket", sel, window),
        "itl_p95": _quantile(config.quantile, f"{m.SGLANG_ITL}_bucket", sel, window),
    }
    if config.waiting is not None:
        queries["waiting"] = config.waiting.replace("$namespace", _quote(namespace)).replace(
            "$revision", _quote(revision)
        )
    return queries


def _quantile(q: float, buckets: str, sel: str, window: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({buckets}{{{sel}}}{window})))"


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
