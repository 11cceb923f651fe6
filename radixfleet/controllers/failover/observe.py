"""Observe: every region's Prometheus, the Route 53 records and health checks, as `Observed`.

A Prometheus that does not answer makes its region blind (`reachable=False`), never bad by
itself; an empty or NaN series is None (unjudged). Route 53 failures leave the weights unread
(None) and the health checks Unknown: the decision then keeps what it cannot see.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from radixfleet.adapters.prometheus import MetricsUnavailable, NoData, Prometheus, PrometheusError
from radixfleet.adapters.route53 import Route53Error, WeightedRecord, WeightedRecords
from radixfleet.controllers.failover.queries import (
    QueryConfig,
    RegionQueries,
    peer_queries,
    region_queries,
)
from radixfleet.controllers.failover.spec import FailoverPolicySpec, Region
from radixfleet.controllers.failover.state import HealthCheck, Observed, RegionSignals

log = logging.getLogger(__name__)

PrometheusFor = Callable[[Region], Prometheus]


@dataclass(frozen=True)
class Records:
    """The policy's weighted records by region name, None when Route 53 could not be read."""

    by_region: Mapping[str, WeightedRecord] | None

    def weights(self) -> dict[str, int] | None:
        if self.by_region is None:
            return None
        return {name: record.weight for name, record in self.by_region.items()}


def read_records(route53: WeightedRecords, spec: FailoverPolicySpec) -> Records:
    """The records of the policy's regions (a region without a record is left out)."""
    try:
        found = route53.records(spec.hosted_zone_id, spec.record_name, spec.record_type)
    except Route53Error as error:
        log.warning("reading %s failed: %s", spec.record_name, error)
        return Records(None)
    by_id = {r.record_id: r.name for r in spec.regions}
    return Records({by_id[sid]: rec for sid, rec in found.items() if sid in by_id})


def health_checks(route53: WeightedRecords, records: Records) -> dict[str, HealthCheck]:
    """Each region's health check status; Unknown where it has none or it cannot be read."""
    out: dict[str, HealthCheck] = {}
    for name, record in (records.by_region or {}).items():
        out[name] = HealthCheck.UNKNOWN
        if record.health_check_id is None:
            continue
        try:
            healthy = route53.health(record.health_check_id).healthy
        except Route53Error as error:
            log.warning("health check of %s unreadable: %s", name, error)
            continue
        if healthy is not None:
            out[name] = HealthCheck.HEALTHY if healthy else HealthCheck.UNHEALTHY
    return out


def observe(
    spec: FailoverPolicySpec,
    *,
    namespace: str,
    route53: WeightedRecords,
    prometheus_for: PrometheusFor,
    at: datetime,
    config: QueryConfig | None = None,
) -> Observed:
    """One interval of every region, with the weights currently in the records."""
    config = config or QueryConfig()
    records = read_records(route53, spec)
    checks = health_checks(route53, records)
    queries = region_queries(
        namespaces=spec.namespaces_or(namespace), models=spec.models,
        window_seconds=spec.signals.window_seconds, slo_seconds=spec.signals.ttft_slo_seconds,
        config=config,
    )  # fmt: skip
    proms = {r.name: prometheus_for(r) for r in spec.regions}
    signals = {}
    for region in spec.regions:
        own = region_signals(proms[region.name], queries, at=at, config=config)
        up, down = peer_view(region.name, proms, at=at, config=config)
        health = checks.get(region.name, HealthCheck.UNKNOWN)
        signals[region.name] = _with(own, health=health, up=up, down=down)
    return Observed(signals=signals, weights=records.weights())


def _with(signals: RegionSignals, *, health: HealthCheck, up: int, down: int) -> RegionSignals:
    return replace(signals, health_check=health, peers_up=up, peers_down=down)


def region_signals(
    prometheus: Prometheus, queries: RegionQueries, *, at: datetime, config: QueryConfig
) -> RegionSignals:
    """One region's own signals; blind when its Prometheus does not answer."""
    try:
        return RegionSignals(
            availability=_scalar(prometheus, queries.availability, at),
            error_rate=_scalar(prometheus, queries.error_rate, at),
            ttft_bad_ratio=_scalar(prometheus, queries.ttft_bad_ratio, at),
            requests=_scalar(prometheus, queries.requests, at),
            ready_replicas=_by_label(prometheus, queries.ready_by_model, config.model_label, at),
        )
    except MetricsUnavailable as error:
        log.info("Prometheus unreachable: %s", error)
        return RegionSignals(reachable=False)


def peer_view(
    region: str, proms: Mapping[str, Prometheus], *, at: datetime, config: QueryConfig
) -> tuple[int, int]:
    """How many probes in the other regions see `region` up, and down."""
    up = down = 0
    for name, prometheus in proms.items():
        if name == region:
            continue
        ok_query, down_query = peer_queries(region, config)
        try:
            up += int(_scalar(prometheus, ok_query, at) or 0)
            down += int(_scalar(prometheus, down_query, at) or 0)
        except MetricsUnavailable:
            continue  # that peer is blind too: it has no view
    return up, down


def _scalar(prometheus: Prometheus, promql: str, at: datetime) -> float | None:
    try:
        return prometheus.scalar(promql, at=at)
    except NoData:  # NotFinite included
        return None
    except MetricsUnavailable:
        raise
    except PrometheusError as error:  # an ambiguous answer: a configuration problem
        log.warning("unusable answer to %s: %s", promql, error)
        return None


def _by_label(
    prometheus: Prometheus, promql: str, label: str, at: datetime
) -> dict[str, int] | None:
    samples = prometheus.vector(promql, at=at)
    return {s.labels.get(label, ""): int(s.value) for s in samples}
