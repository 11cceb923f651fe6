"""The failover's PromQL: one region's serving signals over a short window, from raw series.

Recording rules average over 5 minutes, too slow to notice a region dying within 30 s, so
these read SGLang's counters and histograms and the scrape's `up` directly over the policy's
`signals.windowSeconds`. Scrape assumption (as the local fleet labels its targets, and the
canary's README asks of a cluster's scrape): every SGLang replica and router target carries
`namespace` and `model` labels. Peers' view: each region's Prometheus may probe the other
regions' endpoints (blackbox exporter), as `probe_success{target_region="<region>"}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from radixfleet import metrics_names as m

TTFT_BUCKETS = f"{m.SGLANG_TTFT}_bucket"
TTFT_COUNT = f"{m.SGLANG_TTFT}_count"


@dataclass(frozen=True)
class QueryConfig:
    """Label names and job patterns; another scrape layout only changes these."""

    model_label: str = "model"
    namespace_label: str = "namespace"
    jobs: str = f"{m.SGLANG_JOB_REGEX}|smg-router"
    replica_jobs: str = m.SGLANG_JOB_REGEX
    peer_probe: str = "probe_success"
    peer_label: str = "target_region"


@dataclass(frozen=True)
class RegionQueries:
    """PromQL for one policy's models in one region."""

    availability: str
    requests: str
    error_rate: str
    ttft_bad_ratio: str
    ready_by_model: str


def region_queries(
    *, namespaces: Sequence[str], models: Sequence[str], window_seconds: int,
    slo_seconds: float, config: QueryConfig,
) -> RegionQueries:  # fmt: skip
    """The queries of one interval over the models' InferenceServices in `namespaces`;
    `slo_seconds` picks the TTFT bucket counted as good."""
    models_re, namespaces_re = "|".join(models), "|".join(namespaces)
    where = f'{config.namespace_label}=~"{namespaces_re}"'
    targets = f'{where},{config.model_label}=~"{models_re}"'
    series = f'{where},{m.MODEL_NAME}=~"{models_re}"'
    win = f"[{window_seconds}s]"
    requests = f"sum(increase({m.SGLANG_REQUESTS}{{{series}}}{win}))"
    aborted = f"(sum(increase({m.SGLANG_ABORTED}{{{series}}}{win})) or vector(0))"
    le = m.prometheus_float(m.bucket_at_or_under(slo_seconds, m.SGLANG_TTFT_BUCKETS))
    good = f'sum(increase({TTFT_BUCKETS}{{{series},le="{le}"}}{win}))'
    timed = f"sum(increase({TTFT_COUNT}{{{series}}}{win}))"
    up = f'up{{job=~"{config.replica_jobs}",{targets}}} == 1'
    replicas = f"max by ({config.model_label}, instance) ({up})"
    return RegionQueries(
        availability=f'avg(up{{job=~"{config.jobs}",{targets}}})',
        requests=f"{requests} + {aborted}",
        # Aborted requests are not in num_requests_total, hence the sum in the denominator.
        error_rate=f"{aborted} / ({requests} + {aborted})",
        ttft_bad_ratio=f"1 - ({good} / {timed})",
        ready_by_model=f"sum by ({config.model_label}) ({replicas})",
    )


def peer_queries(region: str, config: QueryConfig) -> tuple[str, str]:
    """Counts of a Prometheus' probes of `region` that succeed, and that fail."""
    probe = f'{config.peer_probe}{{{config.peer_label}="{region}"}}'
    return f"count({probe} == 1)", f"count({probe} == 0)"
