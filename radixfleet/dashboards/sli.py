"""The serving SLIs as Prometheus recording rules, with their names as constants.

Controllers and dashboards read these names and never re-derive an SLI from raw series, so a
p95 TTFT on a Grafana panel is the number the autoscaler, the canary judge and the failover
detector act on. Two levels:

- per-revision rates (labels `region, namespace, model_name, revision`, and `le` for histograms)
  from SGLang's counters and histograms; the canary judge compares revisions with them;
- per-model SLIs (labels `region, namespace, model_name`) derived from those rates: latency
  quantiles, error and prefix-hit ratios, queue, KV usage and replica counts; per-region health
  signals; GPU and tenant usage.

SLO targets come from the catalog as constant series (`slo_target_rules`), so the SLO burn rules
are the same for every model. This module imports neither Grafana's SDK nor any client library.
"""

from __future__ import annotations

from radixfleet import metrics_names as m
from radixfleet.config.catalog import Catalog
from radixfleet.dashboards.rulespec import RecordingRule

MODEL_LABELS = f"{m.REGION}, {m.NAMESPACE}, {m.MODEL_NAME}"
REVISION_LABELS = f"{MODEL_LABELS}, {m.REVISION}"

# The objective behind the catalog's `ttft_p95_ms`: 95% of requests get their first token in time.
SLO_OBJECTIVE = 0.95
SLO_WINDOWS = ("5m", "30m", "1h", "6h")
QUANTILES = (0.5, 0.95, 0.99)

# Per-revision rates.
TTFT_BUCKET_RATE = "radixfleet:ttft_seconds_bucket:rate5m"
ITL_BUCKET_RATE = "radixfleet:itl_seconds_bucket:rate5m"
E2E_BUCKET_RATE = "radixfleet:e2e_seconds_bucket:rate5m"
REQUEST_RATE = "radixfleet:requests:rate5m"
ABORTED_RATE = "radixfleet:aborted_requests:rate5m"
PROMPT_TOKEN_RATE = "radixfleet:prompt_tokens:rate5m"
GENERATION_TOKEN_RATE = "radixfleet:generation_tokens:rate5m"
CACHED_TOKEN_RATE = "radixfleet:cached_tokens:rate5m"

# Per-model SLIs.
ERROR_RATIO = "radixfleet:error_ratio:5m"
PREFIX_HIT_RATIO = "radixfleet:prefix_hit_ratio:5m"
TOKENS_PER_SECOND = "radixfleet:tokens_per_second:5m"
QUEUE_REQUESTS = "radixfleet:queue_requests:sum"
RUNNING_REQUESTS = "radixfleet:running_requests:sum"
KV_USAGE_MAX = "radixfleet:kv_usage:max"
REPLICAS = "radixfleet:replicas:count"

# Per-region health signals (what the failover controller judges a region by).
REGION_TTFT_P95 = "radixfleet:region_ttft_seconds:p95_5m"
REGION_ERROR_RATIO = "radixfleet:region_error_ratio:5m"
REGION_AVAILABILITY = "radixfleet:region_replica_availability:avg"

# GPUs, from DCGM and kube-state-metrics.
GPU_UTILIZATION = "radixfleet:gpu_utilization:avg"
GPUS_IN_USE = "radixfleet:gpus_in_use:sum"
GPUS_PENDING = "radixfleet:gpus_pending:sum"

# Tenants.
TENANT_GPUS_IN_USE = "radixfleet:tenant_gpus_in_use:sum"
TENANT_TOKENS_PER_MINUTE = "radixfleet:tenant_tokens_per_minute:rate5m"
TENANT_TOKEN_BUDGET_RATIO = "radixfleet:tenant_token_budget:ratio"
TENANT_GPU_BUDGET_RATIO = "radixfleet:tenant_gpu_budget:ratio"
TENANT_THROTTLED_RATE = "radixfleet:tenant_throttled_requests:rate5m"

# SLO targets (constant series from the catalog) and the TTFT SLO's bad-request ratios.
SLO_TTFT_TARGET = "radixfleet:slo_ttft_target_seconds"
SLO_ITL_TARGET = "radixfleet:slo_itl_target_seconds"


def quantile(sli: str, q: float) -> str:
    """The recorded name of quantile `q` of a latency SLI: quantile("ttft", 0.95)."""
    return f"radixfleet:{sli}_seconds:p{round(q * 100)}_5m"


def slo_ttft_bad_ratio(window: str) -> str:
    """The recorded share of requests over their model's TTFT target within `window`."""
    return f"radixfleet:slo_ttft_bad:ratio_rate{window}"


TTFT_P95 = quantile("ttft", 0.95)
ITL_P95 = quantile("itl", 0.95)

_HISTOGRAMS = (
    ("ttft", m.SGLANG_TTFT, TTFT_BUCKET_RATE),
    ("itl", m.SGLANG_ITL, ITL_BUCKET_RATE),
    ("e2e", m.SGLANG_E2E, E2E_BUCKET_RATE),
)
_COUNTERS = (
    (REQUEST_RATE, m.SGLANG_REQUESTS),
    (ABORTED_RATE, m.SGLANG_ABORTED),
    (PROMPT_TOKEN_RATE, m.SGLANG_PROMPT_TOKENS),
    (GENERATION_TOKEN_RATE, m.SGLANG_GENERATION_TOKENS),
    (CACHED_TOKEN_RATE, m.SGLANG_CACHED_TOKENS),
)


def _per_model(expr: str) -> str:
    # Sums a per-revision recording rule over revisions.
    return f"sum by ({MODEL_LABELS}) ({expr})"


def _or_zero(expr: str, *, like: str) -> str:
    # SGLang creates some counters on their first increment (aborted and cached tokens); until
    # then a model that serves requests has 0 of them, not no value.
    return f"({expr} or {like} * 0)"


def revision_rate_rules() -> list[RecordingRule]:
    """Per-revision 5-minute rates of SGLang's histograms and counters."""
    rules = [
        RecordingRule(record, f"sum by ({REVISION_LABELS}, le) (rate({metric}_bucket[5m]))")
        for _, metric, record in _HISTOGRAMS
    ]
    rules += [
        RecordingRule(record, f"sum by ({REVISION_LABELS}) (rate({metric}[5m]))")
        for record, metric in _COUNTERS
    ]
    return rules


def latency_quantile_rules() -> list[RecordingRule]:
    """p50, p95 and p99 of TTFT, inter-token and end-to-end latency per model."""
    return [
        RecordingRule(
            quantile(sli, q),
            f"histogram_quantile({q}, sum by ({MODEL_LABELS}, le) ({bucket_rate}))",
        )
        for sli, _, bucket_rate in _HISTOGRAMS
        for q in QUANTILES
    ]


def model_rules() -> list[RecordingRule]:
    """Per-model ratios and gauges the autoscaler and the Model dashboard share."""
    replica = f"max by ({MODEL_LABELS}, {m.INSTANCE}) ({m.SGLANG_RUNNING})"
    requests, prompt = _per_model(REQUEST_RATE), _per_model(PROMPT_TOKEN_RATE)
    aborted = _or_zero(_per_model(ABORTED_RATE), like=requests)
    cached = _or_zero(_per_model(CACHED_TOKEN_RATE), like=prompt)
    return [
        # Aborted requests are not counted in num_requests_total, hence the sum below.
        RecordingRule(ERROR_RATIO, f"{aborted} / ({requests} + {aborted})"),
        RecordingRule(PREFIX_HIT_RATIO, f"{cached} / {prompt}"),
        RecordingRule(
            TOKENS_PER_SECOND,
            f"{_per_model(PROMPT_TOKEN_RATE)} + {_per_model(GENERATION_TOKEN_RATE)}",
        ),
        RecordingRule(QUEUE_REQUESTS, _per_model(m.SGLANG_QUEUE)),
        RecordingRule(RUNNING_REQUESTS, _per_model(m.SGLANG_RUNNING)),
        # The fullest replica is the one that starts queueing first.
        RecordingRule(KV_USAGE_MAX, f"max by ({MODEL_LABELS}) ({m.SGLANG_TOKEN_USAGE})"),
        # Tensor-parallel ranks of one replica share its scrape target, hence max by instance.
        RecordingRule(REPLICAS, f"count by ({MODEL_LABELS}) ({replica})"),
    ]


def region_rules() -> list[RecordingRule]:
    """The serving health signals of each region."""
    requests = f"sum by ({m.REGION}) ({REQUEST_RATE})"
    aborted = _or_zero(f"sum by ({m.REGION}) ({ABORTED_RATE})", like=requests)
    return [
        RecordingRule(
            REGION_TTFT_P95,
            f"histogram_quantile(0.95, sum by ({m.REGION}, le) ({TTFT_BUCKET_RATE}))",
        ),
        RecordingRule(
            REGION_ERROR_RATIO,
            f"{aborted} / ({requests} + {aborted})",
        ),
        RecordingRule(
            REGION_AVAILABILITY, f'avg by ({m.REGION}) (up{{job=~"{m.SGLANG_JOB_REGEX}"}})'
        ),
    ]


def gpu_pods(phase: str) -> str:
    """GPUs requested by pods in `phase`, per pod (kube-state-metrics)."""
    requests = f'{m.KUBE_POD_REQUESTS}{{resource="{m.KUBE_GPU_RESOURCE}"}}'
    by_pod = f"{m.REGION}, {m.NAMESPACE}, {m.POD}"
    in_phase = f'{m.KUBE_POD_PHASE}{{phase="{phase}"}} == 1'
    return f"sum by ({by_pod}) ({requests}) and on ({by_pod}) ({in_phase})"


def gpu_rules() -> list[RecordingRule]:
    """GPU utilization from DCGM and GPUs held by running and pending pods."""
    tenant_of_namespace = (
        f'label_replace({m.KUBE_NAMESPACE_LABELS}{{{m.KUBE_TENANT_LABEL}!=""}}, '
        f'"{m.TENANT}", "$1", "{m.KUBE_TENANT_LABEL}", "(.+)")'
    )
    by_ns = f"{m.REGION}, {m.NAMESPACE}"
    return [
        # DCGM reports percent; the SLI is a ratio like every other.
        RecordingRule(GPU_UTILIZATION, f"avg by ({m.REGION}) ({m.DCGM_GPU_UTIL}) / 100"),
        RecordingRule(GPUS_IN_USE, f"sum by ({by_ns}) ({gpu_pods('Running')})"),
        RecordingRule(GPUS_PENDING, f"sum by ({by_ns}) ({gpu_pods('Pending')})"),
        RecordingRule(
            TENANT_GPUS_IN_USE,
            f"sum by ({m.REGION}, {m.TENANT}) ({GPUS_IN_USE} "
            f"* on ({by_ns}) group_left ({m.TENANT}) {tenant_of_namespace})",
        ),
    ]


def tenant_rules() -> list[RecordingRule]:
    """Tenant usage against budgets.

    Budgets are configuration that every region's quota controller exports alike, so they are
    taken with max; usage is summed over the regions this Prometheus sees.
    """
    tokens = m.TENANT_TOKENS.name
    budget_limit = (
        f"sum by ({m.TENANT}, {m.GPU_TYPE}) "
        f"(max by ({m.TENANT}, {m.GPU_TYPE}, kind) ({m.TENANT_GPU_BUDGET.name}))"
    )
    committed = f"sum by ({m.TENANT}, {m.GPU_TYPE}) ({m.TENANT_GPUS_COMMITTED.name})"
    return [
        RecordingRule(TENANT_TOKENS_PER_MINUTE, f"sum by ({m.TENANT}) (rate({tokens}[5m])) * 60"),
        RecordingRule(
            TENANT_TOKEN_BUDGET_RATIO,
            f"{TENANT_TOKENS_PER_MINUTE} / max by ({m.TENANT}) ({m.TENANT_TOKEN_BUDGET.name})",
        ),
        # The hard limit is guaranteed plus borrowable GPUs.
        RecordingRule(TENANT_GPU_BUDGET_RATIO, f"{committed} / {budget_limit}"),
        RecordingRule(
            TENANT_THROTTLED_RATE,
            f"sum by ({m.REGION}, {m.TENANT}) (rate({m.TENANT_THROTTLED.name}[5m]))",
        ),
    ]


def slo_target_rules(catalog: Catalog) -> list[RecordingRule]:
    """Each model's TTFT and ITL targets as constant series, labelled with the bucket to count.

    The label `le` names the largest SGLang bucket boundary at or under the target, so a request
    counts as good only when it was surely in time; the value is the target itself.
    """
    rules: list[RecordingRule] = []
    for model in sorted(catalog.models, key=lambda mod: mod.name):
        for record, target_ms, buckets in (
            (SLO_TTFT_TARGET, model.slo.ttft_p95_ms, m.SGLANG_TTFT_BUCKETS),
            (SLO_ITL_TARGET, model.slo.itl_p95_ms, m.SGLANG_ITL_BUCKETS),
        ):
            le = m.bucket_at_or_under(target_ms / 1000, buckets)
            labels = {m.MODEL_NAME: model.name, m.LE: m.prometheus_float(le)}
            rules.append(RecordingRule(record, f"vector({target_ms / 1000})", labels))
    return rules


def slo_burn_rules() -> list[RecordingRule]:
    """The share of requests slower than their model's TTFT target, over each burn window."""
    return [RecordingRule(slo_ttft_bad_ratio(w), _bad_ratio(w)) for w in SLO_WINDOWS]


def _bad_ratio(window: str) -> str:
    good = (
        f"sum by ({MODEL_LABELS}) (rate({m.SGLANG_TTFT}_bucket[{window}]) "
        f"and on ({m.MODEL_NAME}, le) {SLO_TTFT_TARGET})"
    )
    total = f"sum by ({MODEL_LABELS}) (rate({m.SGLANG_TTFT}_count[{window}]))"
    # Bucket and count rates are extrapolated separately, so their ratio can stray past 1 by a
    # hair; a share of bad requests is never below zero.
    return f"clamp_min(1 - ({good} / {total}), 0)"
