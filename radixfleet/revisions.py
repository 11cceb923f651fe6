"""A revision's LLM serving numbers over one window, and a canary's against its stable's.

The canary controller reads them from Prometheus and judges them
(`radixfleet.controllers.canary.decide`); the fleet twin computes the same numbers from its requests
(`radixfleet.twin.metrics`). They live in the kernel so that the twin needs no controller to speak
of them. Metric names are the canary spec's (`ttftP95`, `itlP95`, `errorRate`, `cacheHitRate`), as
stored in a CanaryPolicy. `pick_revision` is the split of a model's requests between its revisions,
which the twin's entry and the local fleet's entry both follow.
"""

from __future__ import annotations

from pydantic import Field

from radixfleet.wire import Wire, finite

ERROR_RATE = "errorRate"

STABLE, CANARY, BASELINE = 0, 1, 2  # what `pick_revision` answers

#: The field of `RevisionMetrics` that holds each metric a check can judge.
FIELD_OF: dict[str, str] = {
    "ttftP95": "ttft_p95",
    "itlP95": "itl_p95",
    ERROR_RATE: "error_rate",
    "cacheHitRate": "cache_hit_rate",
}


#: The field of `RevisionMetrics` holding the histogram behind each latency metric.
BUCKETS_OF: dict[str, str] = {"ttftP95": "ttft_buckets", "itlP95": "itl_buckets"}

#: (upper bound `le`, cumulative count) over the window, increasing, the last bound +Inf.
Histogram = tuple[tuple[float, float], ...]


class RevisionMetrics(Wire):
    """One revision's numbers over one analysis window; None where nothing was measured.

    The latency histograms let the judge test significance (radixfleet/significance.py); they
    are not written to a policy's status (`exclude`), which keeps the quantiles only.
    """

    requests: float | None = None
    ttft_p95: float | None = None
    itl_p95: float | None = None
    error_rate: float | None = None
    cache_hit_rate: float | None = None
    ttft_buckets: Histogram | None = Field(default=None, exclude=True)
    itl_buckets: Histogram | None = Field(default=None, exclude=True)

    def value(self, metric: str) -> float | None:
        """The finite value of `metric`, or None when it is missing, NaN or infinite."""
        return finite(getattr(self, FIELD_OF[metric]))

    def histogram(self, metric: str) -> Histogram | None:
        """The window's histogram behind a latency metric, None for other metrics or unknown."""
        field = BUCKETS_OF.get(metric)
        return None if field is None else getattr(self, field)


class Measured(Wire):
    """The canary's and the stable revision's numbers over the same window, and a baseline's
    when one runs.

    A baseline is the stable model on replicas of their own, sent the canary's share of the
    traffic (Kayenta's baseline): at 5% a canary's replica runs batches of one or two while the
    stable's run dozens, so the stable revision's latency is not the canary's yardstick, and a
    twice-slower canary can look faster than it. Beside a baseline, the canary's latency and
    cache hit rate are judged against the baseline (`reference`); without one, against the
    stable revision. Errors do not depend on load: they are judged against the stable revision
    and the baseline together (`reference_for`), both the stable model, whose many requests
    make the error test far stronger than the baseline's few alone.
    """

    canary: RevisionMetrics = Field(default_factory=RevisionMetrics)
    stable: RevisionMetrics = Field(default_factory=RevisionMetrics)
    baseline: RevisionMetrics | None = None

    @property
    def reference(self) -> RevisionMetrics:
        """What the canary is judged against: the baseline when one runs, else the stable."""
        return self.stable if self.baseline is None else self.baseline

    @property
    def against(self) -> str:
        """The name of `reference`, for the decision's reason."""
        return "stable" if self.baseline is None else "baseline"

    def reference_for(self, metric: str) -> RevisionMetrics:
        """What the canary's `metric` is judged against: for errors beside a baseline, the
        stable revision and the baseline pooled; else `reference`."""
        if metric != ERROR_RATE or self.baseline is None:
            return self.reference
        return _pooled_errors(self.stable, self.baseline)

    def against_for(self, metric: str) -> str:
        """The name of `reference_for(metric)`, for the decision's reason."""
        if metric != ERROR_RATE or self.baseline is None:
            return self.against
        return "stable and baseline"


def _pooled_errors(stable: RevisionMetrics, baseline: RevisionMetrics) -> RevisionMetrics:
    """The stable revision and the baseline as one, for the error rate: the requests and
    errors of those that say them summed (at 50% the stable revision may serve nothing), the
    baseline alone when the stable does not say."""
    counts = [
        (requests, rate)
        for m in (stable, baseline)
        if (requests := finite(m.requests)) and (rate := finite(m.error_rate)) is not None
    ]
    if not counts:
        return baseline
    requests = sum(n for n, _ in counts)
    return RevisionMetrics(requests=requests, error_rate=sum(n * r for n, r in counts) / requests)


def pick_revision(u_revision: float, *, weight: int, canary: bool, baseline: bool) -> int:
    """The revision a request drawn `u_revision` (uniform in 0..1) goes to, as the entry splits:
    the canary's `weight` percent to the CANARY while there is one, as much again to a
    `baseline` that serves (BASELINE), never more than the rest, and the rest to the STABLE
    revision. A baseline not serving yet (or at all: no GPU for it) leaves its share to the stable
    revision; the judge then halts on the baseline's too few requests, and never blames the
    canary for it."""
    share = u_revision * 100.0
    if not (weight and canary):
        return STABLE
    if share < weight:
        return CANARY
    if baseline and share < weight + min(weight, 100 - weight):
        return BASELINE
    return STABLE
