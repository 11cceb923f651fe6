"""The fleet's alerts, written over the shared SLIs of `sli.py` and radixfleet's own metrics.

Thresholds and `for` durations live here, each with the reason for its value. Every alert has a
firing and a resolving case in `dashboards/rules/tests/`, run by `promtool test rules`.
"""

from __future__ import annotations

from radixfleet import metrics_names as m
from radixfleet.dashboards import sli
from radixfleet.dashboards.rulespec import AlertRule
from radixfleet.dashboards.uids import CANARY_UID, FLEET_UID, MODEL_UID, REGIONS_UID, TENANT_UID

# Multi-window, multi-burn-rate alerts (Google SRE workbook, ch. 5): page when 2% of a 30-day
# budget burns in an hour (14.4x) or 5% in six hours (6x); the short window ends the alert soon
# after the burn stops.
FAST_BURN = 14.4
SLOW_BURN = 6.0
ERROR_BUDGET = 1 - sli.SLO_OBJECTIVE

# Warn before a tenant is throttled or refused admission, while there is time to raise a budget.
NEAR_BUDGET = 0.9

# A prefix hit ratio under half of its hourly mean, on a model that had real reuse, means the
# router lost its cache affinity (a router restart, a replica churn, a routing change).
HIT_COLLAPSE_FACTOR = 0.5
HIT_BASELINE_FLOOR = 0.2

# A GPU node joins in 80-120 s (CALIBRATION.md); five minutes pending is a stuck pod, not a
# cold start.
GPU_PENDING_FOR = "5m"


def _burn(long: str, short: str, factor: float) -> str:
    threshold = round(factor * ERROR_BUDGET, 6)
    return (
        f"{sli.slo_ttft_bad_ratio(long)} > {threshold} "
        f"and {sli.slo_ttft_bad_ratio(short)} > {threshold}"
    )


def _burn_description(long: str, short: str, factor: float) -> str:
    days = 30 / factor
    return (
        "{{ $value | humanizePercentage }} of requests missed the TTFT target over the last "
        f"{long}, and more than {factor * ERROR_BUDGET:.0%} over the last {short}: at this rate "
        f"a 30-day error budget lasts {days:.0f} days."
    )


def slo_burn_alerts() -> list[AlertRule]:
    """TTFT SLO burn, fast (1h and 5m windows) and slow (6h and 30m)."""
    what = "of {{ $labels.model_name }} in {{ $labels.namespace }} ({{ $labels.region }})"
    return [
        AlertRule(
            alert="RadixfleetSLOBurnFast",
            expr=_burn("1h", "5m", FAST_BURN),
            for_="2m",
            severity="critical",
            summary=f"TTFT SLO budget {what} burns {FAST_BURN:g}x too fast",
            description=_burn_description("hour", "5m", FAST_BURN),
            signals=(sli.slo_ttft_bad_ratio("1h"), sli.slo_ttft_bad_ratio("5m")),
            dashboard=MODEL_UID,
        ),
        AlertRule(
            alert="RadixfleetSLOBurnSlow",
            expr=_burn("6h", "30m", SLOW_BURN),
            for_="15m",
            severity="warning",
            summary=f"TTFT SLO budget {what} burns {SLOW_BURN:g}x too fast",
            description=_burn_description("6 hours", "30m", SLOW_BURN),
            signals=(sli.slo_ttft_bad_ratio("6h"), sli.slo_ttft_bad_ratio("30m")),
            dashboard=MODEL_UID,
        ),
    ]


def canary_alert() -> AlertRule:
    """A canary check that keeps failing: the controller is rolling back or should be."""
    failed = f"max by ({m.NAMESPACE}, {m.ISVC}, check) ({m.CANARY_CHECK_FAILED.name})"
    return AlertRule(
        alert="RadixfleetCanaryFailing",
        expr=f"{failed} > 0",
        # Two analyses at Flagger's default 60 s interval: one failed check may be noise.
        for_="2m",
        severity="warning",
        summary="Canary of {{ $labels.namespace }}/{{ $labels.isvc }} fails {{ $labels.check }}",
        description="The canary revision is worse than stable on {{ $labels.check }}.",
        signals=(failed, m.CANARY_CHECK_VALUE.name),
        dashboard=CANARY_UID,
    )


def region_alert() -> AlertRule:
    """A region the failover controller judges unhealthy (it is shifting traffic out)."""
    healthy = m.REGION_HEALTHY.name
    return AlertRule(
        alert="RadixfleetRegionUnhealthy",
        expr=f"{healthy} == 0",
        for_="1m",
        severity="critical",
        summary="Region {{ $labels.region }} is unhealthy",
        description=(
            "The failover controller judged {{ $labels.region }} unhealthy from its serving SLIs "
            "(TTFT, errors, availability) and moves its Route 53 weight to other regions."
        ),
        signals=(healthy, sli.REGION_TTFT_P95, sli.REGION_ERROR_RATIO, sli.REGION_AVAILABILITY),
        dashboard=REGIONS_UID,
    )


def tenant_alerts() -> list[AlertRule]:
    """Tenants close to their token-rate or GPU budget."""
    return [
        AlertRule(
            alert="RadixfleetTenantNearTokenBudget",
            expr=f"{sli.TENANT_TOKEN_BUDGET_RATIO} > {NEAR_BUDGET}",
            for_="5m",
            severity="warning",
            summary="Tenant {{ $labels.tenant }} uses {{ $value | humanizePercentage }} "
            "of its token budget",
            description="Requests beyond the budget are throttled with HTTP 429.",
            signals=(sli.TENANT_TOKEN_BUDGET_RATIO,),
            dashboard=TENANT_UID,
        ),
        AlertRule(
            alert="RadixfleetTenantNearGpuBudget",
            expr=f"{sli.TENANT_GPU_BUDGET_RATIO} > {NEAR_BUDGET}",
            for_="5m",
            severity="warning",
            summary="Tenant {{ $labels.tenant }} committed {{ $value | humanizePercentage }} "
            "of its {{ $labels.gpu_type }} budget",
            description="New InferenceServices or larger maxReplicas will be refused admission.",
            signals=(sli.TENANT_GPU_BUDGET_RATIO,),
            dashboard=TENANT_UID,
        ),
    ]


def prefix_hit_alert() -> AlertRule:
    """The prefix-cache hit ratio of a model collapsed against its own recent past."""
    now = sli.PREFIX_HIT_RATIO
    baseline = f"avg_over_time({sli.PREFIX_HIT_RATIO}[1h])"
    return AlertRule(
        alert="RadixfleetPrefixHitRateCollapse",
        expr=(f"{now} < {HIT_COLLAPSE_FACTOR} * {baseline} and {baseline} > {HIT_BASELINE_FLOOR}"),
        for_="10m",
        severity="warning",
        summary="Prefix hit ratio of {{ $labels.model_name }} in {{ $labels.region }} collapsed",
        description=(
            "The prefix-cache hit ratio is {{ $value | humanizePercentage }}, under half of its "
            "hourly mean: requests lost their cache affinity, so prefill work and TTFT rise."
        ),
        signals=(now, baseline),
        dashboard=MODEL_UID,
    )


def gpu_pending_alert() -> AlertRule:
    """GPU pods that wait for a node far longer than a node takes to join."""
    pending = sli.gpu_pods("Pending")
    return AlertRule(
        alert="RadixfleetGpuPodsPending",
        expr=pending,
        for_=GPU_PENDING_FOR,
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.pod }} waits for GPUs in {{ $labels.region }}",
        description=(
            "The pod has been Pending for more than " + GPU_PENDING_FOR + ": the GPU pool is at "
            "its max_nodes, the instance type has no capacity, or taints do not match."
        ),
        signals=(sli.gpu_pods("Running"), m.KUBE_POD_PHASE),
        dashboard=FLEET_UID,
    )


def all_alerts() -> list[AlertRule]:
    """Every alert, in the order the rule file lists them."""
    return [
        *slo_burn_alerts(),
        canary_alert(),
        region_alert(),
        *tenant_alerts(),
        prefix_hit_alert(),
        gpu_pending_alert(),
    ]
