"""The metric names and labels radixfleet reads and writes, spelled once.

Three kinds live here:

- radixfleet's own series, exported by its controllers (quota, failover, canary, autoscale).
  The controllers export exactly these names and labels; the dashboards and the Prometheus rules
  in `radixfleet.dashboards` read them. Each one is documented on its `Metric`.
- The series of the components radixfleet runs on: SGLang (`sglang:*`, names and types from
  sglang 0.5.23's `metrics_collector.py`), NVIDIA's DCGM exporter and kube-state-metrics.
- The label keys the fleet relies on. Every per-region series carries `region`: each region's
  Prometheus sets it as an external label, and the local fleet sets it as a target label.

And how an SLO meets SGLang's histogram buckets (`bucket_at_or_under`, `prometheus_float`): the
dashboards' SLI rules and the failover's queries pick the same `le`.

This module imports nothing but the standard library, so a decision module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Metric:
    """A metric's name, type, labels (beyond the scrape's own) and meaning."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str


# Label keys.
REGION = "region"
NAMESPACE = "namespace"
MODEL_NAME = "model_name"  # SGLang's served model name: the InferenceService's name.
ISVC = "isvc"  # the InferenceService's name; equal to model_name by construction.
REVISION = "revision"  # the Knative revision a replica belongs to, relabelled by the scrape.
TENANT = "tenant"
GPU_TYPE = "gpu_type"
INSTANCE = "instance"
POD = "pod"
LE = "le"

# ---- radixfleet's own series ----------------------------------------------------------------

TENANT_TOKENS = Metric(
    "radixfleet_tenant_tokens_total",
    "counter",
    (REGION, TENANT, MODEL_NAME, "kind"),
    "Tokens charged to a tenant: kind=prompt on admission, kind=completion while streaming.",
)
TENANT_THROTTLED = Metric(
    "radixfleet_tenant_throttled_requests_total",
    "counter",
    (REGION, TENANT),
    "Requests the quota controller refused (HTTP 429) because the tenant's token budget was spent.",
)
PROMPT_COUNTS = Metric(
    "radixfleet_prompt_counts_total",
    "counter",
    (REGION, MODEL_NAME, "by"),
    "Prompts the entry counted on admission: by=tokenizer (the model's, at its router) or "
    "by=bytes (a bound no tokenizer exceeds, charged while the router cannot count).",
)
TENANT_TOKEN_BUDGET = Metric(
    "radixfleet_tenant_token_budget_per_minute",
    "gauge",
    (TENANT,),
    "The tenant's token budget in tokens per minute, from the catalog.",
)
TENANT_GPU_BUDGET = Metric(
    "radixfleet_tenant_gpu_budget",
    "gauge",
    (TENANT, GPU_TYPE, "kind"),
    "The tenant's GPU budget of one GPU type: kind=guaranteed, or kind=borrow on top of it.",
)
TENANT_GPUS_COMMITTED = Metric(
    "radixfleet_tenant_gpus_committed",
    "gauge",
    (REGION, TENANT, GPU_TYPE),
    "GPUs admitted for the tenant in a region, counting every InferenceService's maxReplicas.",
)
REGION_WEIGHT = Metric(
    "radixfleet_region_weight",
    "gauge",
    (REGION, MODEL_NAME),
    "The Route 53 weight (0-255) the failover controller set for a model's record in a region.",
)
REGION_HEALTHY = Metric(
    "radixfleet_region_healthy",
    "gauge",
    (REGION,),
    "1 when the failover controller judges the region healthy from its serving SLIs, else 0.",
)
FAILOVER_EVENTS = Metric(
    "radixfleet_failover_events_total",
    "counter",
    (REGION, "direction"),
    "Traffic shifts of the failover controller: direction=out of a region, or back into it.",
)
CANARY_WEIGHT = Metric(
    "radixfleet_canary_weight",
    "gauge",
    (NAMESPACE, ISVC),
    "The canaryTrafficPercent (0-100) the canary controller set on an InferenceService.",
)
CANARY_CHECK_VALUE = Metric(
    "radixfleet_canary_check_value",
    "gauge",
    (NAMESPACE, ISVC, "check", REVISION),
    "The value of one canary check at the last analysis: revision=canary, and what it was"
    " compared with (stable, baseline, or stable+baseline for errors beside a baseline).",
)
CANARY_CHECK_FAILED = Metric(
    "radixfleet_canary_check_failed",
    "gauge",
    (NAMESPACE, ISVC, "check"),
    "1 when the check failed at the last analysis (canary worse than stable beyond tolerance).",
)
CANARY_DECISIONS = Metric(
    "radixfleet_canary_decisions_total",
    "counter",
    (NAMESPACE, ISVC, "decision"),
    "Decisions of the canary controller, one of CANARY_DECISION_VALUES.",
)
DESIRED_REPLICAS = Metric(
    "radixfleet_desired_replicas",
    "gauge",
    (NAMESPACE, ISVC),
    "The replica count the autoscaler decided for an InferenceService.",
)

RADIXFLEET_METRICS = (
    TENANT_TOKENS,
    TENANT_THROTTLED,
    PROMPT_COUNTS,
    TENANT_TOKEN_BUDGET,
    TENANT_GPU_BUDGET,
    TENANT_GPUS_COMMITTED,
    REGION_WEIGHT,
    REGION_HEALTHY,
    FAILOVER_EVENTS,
    CANARY_WEIGHT,
    CANARY_CHECK_VALUE,
    CANARY_CHECK_FAILED,
    CANARY_DECISIONS,
    DESIRED_REPLICAS,
)

# The checks the canary controller judges, and the decisions it records.
CANARY_CHECKS = ("ttft_p95", "itl_p95", "error_ratio", "prefix_hit_ratio")
CANARY_DECISION_VALUES = ("advance", "hold", "halt", "promote", "rollback")

# ---- SGLang (names and types as in sglang 0.5.23) --------------------------------------------

SGLANG_TTFT = "sglang:time_to_first_token_seconds"
SGLANG_ITL = "sglang:inter_token_latency_seconds"
SGLANG_E2E = "sglang:e2e_request_latency_seconds"
SGLANG_REQUESTS = "sglang:num_requests_total"
SGLANG_ABORTED = "sglang:num_aborted_requests_total"
SGLANG_PROMPT_TOKENS = "sglang:prompt_tokens_total"
SGLANG_GENERATION_TOKENS = "sglang:generation_tokens_total"
SGLANG_CACHED_TOKENS = "sglang:cached_tokens_total"
SGLANG_RUNNING = "sglang:num_running_reqs"
SGLANG_QUEUE = "sglang:num_queue_reqs"
SGLANG_TOKEN_USAGE = "sglang:token_usage"
SGLANG_CACHE_HIT_RATE = "sglang:cache_hit_rate"
SGLANG_GEN_THROUGHPUT = "sglang:gen_throughput"

# The latency histograms' bucket edges the emulated replica exports (and the twin bins its
# requests into, so the canary judges the same histograms in both): in the spirit of SGLang's
# defaults, with finer low edges for canary judgement (SGLang reads its edges from environment
# variables, so a platform can set the same).
EMULATED_TTFT_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0),
    *(2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0),
)
EMULATED_ITL_BUCKETS = (
    *(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06),
    *(0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
)

# SGLang's default histogram buckets (seconds). The SLO rules count a request as good only under
# a bucket boundary, so they need to know which boundaries exist.
SGLANG_TTFT_BUCKETS = (
    *(0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
    *(10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0),
)
SGLANG_ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)

# The scrape jobs of SGLang replicas match this: `up` of these jobs is replica availability.
SGLANG_JOB_REGEX = ".*sglang.*"

# ---- NVIDIA DCGM exporter and kube-state-metrics ---------------------------------------------

DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, per GPU; labels gpu, UUID, modelName, pod, ...
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB of frame buffer in use, per GPU
KUBE_POD_PHASE = "kube_pod_status_phase"
KUBE_POD_REQUESTS = "kube_pod_container_resource_requests"
KUBE_NAMESPACE_LABELS = "kube_namespace_labels"
# kube-state-metrics spells the extended resource nvidia.com/gpu with underscores.
KUBE_GPU_RESOURCE = "nvidia_com_gpu"
# kube-state-metrics exports the namespace label radixfleet.io/tenant as this label when started
# with --metric-labels-allowlist=namespaces=[radixfleet.io/tenant].
KUBE_TENANT_LABEL = "label_radixfleet_io_tenant"


def bucket_at_or_under(target: float, buckets: tuple[float, ...]) -> float:
    """The largest bucket boundary <= target; an SLO under the smallest bucket is an error."""
    fitting = [b for b in buckets if b <= target + 1e-12]
    if not fitting:
        raise ValueError(f"SLO target {target} s is under SGLang's smallest bucket {buckets[0]} s")
    return max(fitting)


def prometheus_float(value: float) -> str:
    """A float as Python's Prometheus client writes it into `le` (0.4 -> "0.4", 1 -> "1.0")."""
    return repr(float(value))
