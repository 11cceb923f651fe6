"""Observe: an InferenceService, its serving Revision and Prometheus, as one `Observed`.

The serving revision is the one KServe sends most traffic to (`status.components.predictor.
traffic`), else the last rolled out, else the latest ready. Ready and starting replicas come
from the Revision's status (`actualReplicas`, `desiredReplicas`), gauges per pod from Prometheus.
A gauge that is empty or NaN for a pod becomes None and the decision halts on it; a Prometheus
that does not answer becomes `metrics_error` (halt). Model-wide numbers without data (a latency
quantile over no requests) are None: nothing to push with, nothing to halt on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from radixfleet.adapters.prometheus import (
    MetricsUnavailable,
    NoData,
    Prometheus,
    PrometheusError,
)
from radixfleet.controllers.autoscale.queries import QueryConfig, model_queries, pod_queries
from radixfleet.controllers.autoscale.state import Observed, ReplicaMetrics


def predictor_status(isvc: Mapping[str, Any]) -> Mapping[str, Any]:
    """`status.components.predictor`, empty before KServe reports."""
    return dict(isvc.get("status", {}).get("components", {}).get("predictor", {}))


def serving_revision(isvc: Mapping[str, Any]) -> str | None:
    """The predictor revision that carries most of the InferenceService's traffic."""
    status = predictor_status(isvc)
    routed = [
        t for t in status.get("traffic") or [] if t.get("revisionName") and t.get("percent", 0)
    ]
    if routed:
        return str(max(routed, key=lambda t: int(t["percent"]))["revisionName"])
    name = status.get("latestRolledoutRevision") or status.get("latestReadyRevision")
    return str(name) if name else None


def ceiling(isvc: Mapping[str, Any]) -> int | None:
    """The InferenceService's maxReplicas (what its tenant's quota admitted)."""
    value = isvc.get("spec", {}).get("predictor", {}).get("maxReplicas")
    return None if value is None else int(value)


def replica_counts(revision: Mapping[str, Any] | None) -> tuple[int, int]:
    """(ready, starting) pods of a Revision, from the status Knative keeps."""
    status = (revision or {}).get("status", {})
    ready = int(status.get("actualReplicas") or 0)
    wanted = int(status.get("desiredReplicas") or 0)
    return ready, max(0, wanted - ready)


def observe(
    *,
    isvc: Mapping[str, Any],
    revision: Mapping[str, Any] | None,
    prometheus: Prometheus,
    config: QueryConfig,
    at: datetime,
) -> Observed:
    """One snapshot of the InferenceService's serving revision."""
    name = serving_revision(isvc)
    ready, starting = replica_counts(revision)
    base = Observed(ready=ready, starting=starting, revision=name, ceiling=ceiling(isvc))
    if name is None:
        return _with(base, metrics_error="KServe reports no serving revision yet")
    if revision is None:
        return _with(base, metrics_error=f"revision {name} not found")
    namespace = isvc["metadata"]["namespace"]
    try:
        per_pod = pod_queries(namespace=namespace, revision=name, config=config)
        replicas = _replicas(prometheus, per_pod, at, pod_label=config.pod_label)
        wide = model_queries(namespace=namespace, revision=name, config=config)
        model = {field: _scalar(prometheus, query, at) for field, query in wide.items()}
    except MetricsUnavailable as error:
        return _with(base, metrics_error=f"Prometheus failed: {error}")
    except PrometheusError as error:  # a query that does not aggregate: a config problem
        return _with(base, metrics_error=f"unusable Prometheus answer: {error}")
    return _with(base, replicas=replicas, **model)


def _with(base: Observed, **fields: Any) -> Observed:
    return replace(base, **fields)


def _replicas(
    prometheus: Prometheus, queries: Mapping[str, str], at: datetime, *, pod_label: str
) -> tuple[ReplicaMetrics, ...]:
    by_field = {
        field: _per_pod(prometheus, query, at, pod_label) for field, query in queries.items()
    }
    pods = sorted(set().union(*(values.keys() for values in by_field.values())))
    return tuple(
        ReplicaMetrics(name=pod, **{field: values.get(pod) for field, values in by_field.items()})
        for pod in pods
    )


def _per_pod(
    prometheus: Prometheus, promql: str, at: datetime, pod_label: str
) -> dict[str, float | None]:
    return {
        sample.labels.get(pod_label, ""): sample.value if math.isfinite(sample.value) else None
        for sample in prometheus.vector(promql, at=at)
    }


def _scalar(prometheus: Prometheus, promql: str, at: datetime) -> float | None:
    try:
        return prometheus.scalar(promql, at=at)
    except NoData:  # NotFinite included: no requests in the window, nothing to judge
        return None
