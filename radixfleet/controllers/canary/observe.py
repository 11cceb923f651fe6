"""Observe: turn an InferenceService, a Prometheus and the policy's commands into `Observed`.

Reading KServe's status: the predictor's `latestCreatedRevision` is the canary when it differs
from `latestRolledoutRevision` (the last revision that had 100%), which is the stable one.
Metrics go through the `Prometheus` port; a series that is empty or NaN becomes None (the
decision halts on it), and a Prometheus that does not answer becomes `metrics_error`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from radixfleet.adapters.prometheus import MetricsUnavailable, NoData, Prometheus, PrometheusError
from radixfleet.controllers.canary.queries import (
    REQUESTS,
    QueryConfig,
    histogram_queries,
    revision_queries,
)
from radixfleet.controllers.canary.spec import CanaryPolicySpec
from radixfleet.controllers.canary.state import (
    FIELD_OF,
    Manual,
    Measured,
    Observed,
    RevisionMetrics,
    read_manual,
)
from radixfleet.revisions import BUCKETS_OF, Histogram


def predictor_status(isvc: Mapping[str, Any]) -> Mapping[str, Any]:
    """`status.components.predictor` of an InferenceService, empty before KServe reports."""
    return dict(isvc.get("status", {}).get("components", {}).get("predictor", {}))


def canary_percent(isvc: Mapping[str, Any]) -> int | None:
    """The predictor's canaryTrafficPercent, None when the field is absent."""
    value = isvc.get("spec", {}).get("predictor", {}).get("canaryTrafficPercent")
    return None if value is None else int(value)


def observe_isvc(isvc: Mapping[str, Any], *, manual: Manual | None = None) -> Observed:
    """The InferenceService's side of an observation, without metrics."""
    status = predictor_status(isvc)
    latest = status.get("latestCreatedRevision")
    stable = status.get("latestRolledoutRevision")
    return Observed(
        inference_service=isvc["metadata"]["name"],
        canary_revision=latest if latest and latest != stable else None,
        stable_revision=stable,
        canary_ready=bool(latest) and status.get("latestReadyRevision") == latest,
        weight=canary_percent(isvc),
        manual=manual or Manual(),
    )


def commands(policy: Mapping[str, Any], observed: Observed) -> Manual:
    """The policy's command annotations that apply to this rollout."""
    if observed.canary_revision is None:
        return Manual()
    return read_manual(
        policy.get("metadata", {}).get("annotations") or {},
        inference_service=observed.inference_service,
        canary_revision=observed.canary_revision,
    )


def measure(
    prometheus: Prometheus,
    *,
    namespace: str,
    observed: Observed,
    spec: CanaryPolicySpec,
    at: datetime,
    config: QueryConfig,
    with_baseline: bool = False,
) -> tuple[Measured | None, str | None]:
    """The canary's and the stable revision's window, and the baseline's `with_baseline` (the
    stable revision's replicas in the baseline pool), or None and why Prometheus failed."""
    assert observed.canary_revision is not None
    window = Window(prometheus, namespace, spec, at, config)
    needs_stable = any(c.needs_stable for c in spec.checks) and observed.stable_revision
    try:
        canary = window.revision(observed.canary_revision)
        stable = window.revision(observed.stable_revision) if needs_stable else RevisionMetrics()
        baseline = None
        if needs_stable and with_baseline:
            baseline = window.revision(observed.stable_revision, baseline=True)
    except MetricsUnavailable as error:
        return None, f"Prometheus failed: {error}"
    except PrometheusError as error:  # e.g. a query that does not aggregate: a config problem
        return None, f"unusable Prometheus answer: {error}"
    return Measured(canary=canary, stable=stable, baseline=baseline), None


@dataclass(frozen=True)
class Window:
    """One analysis window: the same range and evaluation time for every revision."""

    prometheus: Prometheus
    namespace: str
    spec: CanaryPolicySpec
    at: datetime
    config: QueryConfig

    def revision(self, revision: str | None, *, baseline: bool = False) -> RevisionMetrics:
        assert revision is not None
        queries = revision_queries(
            namespace=self.namespace,
            revision=revision,
            window_seconds=self.spec.interval_seconds,
            config=self.config,
            baseline=baseline,
        )
        values: dict[str, object] = {
            FIELD_OF[c.metric]: self._value(queries[c.metric]) for c in self.spec.checks
        }
        histograms = histogram_queries(
            namespace=self.namespace,
            revision=revision,
            window_seconds=self.spec.interval_seconds,
            config=self.config,
            baseline=baseline,
        )
        for check in self.spec.checks:
            if check.needs_stable and check.metric in histograms:
                values[BUCKETS_OF[check.metric]] = self._histogram(histograms[check.metric])
        return RevisionMetrics(requests=self._value(queries[REQUESTS]), **values)

    def _value(self, promql: str) -> float | None:
        try:
            return self.prometheus.scalar(promql, at=self.at)
        except NoData:  # NotFinite included: NaN and infinities are missing data
            return None

    def _histogram(self, promql: str) -> Histogram | None:
        """The window's buckets in increasing `le`; None when there are none (the judge then
        decides on the quantile alone)."""
        samples = self.prometheus.vector(promql, at=self.at)
        buckets = sorted((float(s.labels["le"]), s.value) for s in samples if "le" in s.labels)
        if not buckets or buckets[-1][0] != math.inf or any(math.isnan(v) for _, v in buckets):
            return None
        return tuple(buckets)
