"""Per-revision numbers over a sliding window: what the canary judge reads instead of PromQL.

The controller asks Prometheus for p95 TTFT and ITL (histogram quantiles), the error ratio and
the cache hit rate of each revision over its analysis interval; the twin computes the same
from the requests that ended in the window, exactly rather than from histogram buckets. The
latency histograms the judge tests significance on are binned at the emulated replica's edges,
as a Prometheus scraping it would have them. For
judges that read whole requests (Flagger's builtin request-duration), `canary_p99` also gives the
canary's p99 TTFT and request duration (arrival to last token).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

from radixfleet import metrics_names as m
from radixfleet.replica import RequestSpec
from radixfleet.revisions import Histogram, Measured, RevisionMetrics


class CanaryWindow:
    """Finished requests and 5xx answers of the stable (0) and canary (1) revisions, and of the
    baseline (2) when one runs (radixfleet.revisions.Measured)."""

    STABLE, CANARY, BASELINE = 0, 1, 2

    def __init__(self, window_s: float, *, baseline: bool = False) -> None:
        self.window_s = window_s
        self.baseline = baseline
        # Per finished request: end, TTFT, mean ITL, cached and prompt tokens, duration.
        self._done: tuple[deque[tuple[float, float, float, int, int, float]], ...] = (
            deque(),
            deque(),
            deque(),
        )
        self._errors: tuple[deque[float], ...] = (deque(), deque(), deque())

    def add(
        self, revision: int, t: float, ttft: float, itl: float, cached: int, spec: RequestSpec
    ) -> None:
        """A request of `revision` finished at `t`."""
        gaps = 0.0 if math.isnan(itl) else itl * max(0, spec.output_tokens - 1)
        self._done[revision].append((t, ttft, itl, cached, spec.prompt_tokens, ttft + gaps))

    def error(self, revision: int, t: float) -> None:
        """A 5xx answer (or a request lost to a crash) of `revision` at `t`."""
        self._errors[revision].append(t)

    def measure(self, now: float) -> Measured:
        """Each revision's numbers over the last `window_s` seconds."""
        return Measured(
            canary=self._revision(self.CANARY, now),
            stable=self._revision(self.STABLE, now),
            baseline=self._revision(self.BASELINE, now) if self.baseline else None,
        )

    def canary_p99(self, now: float) -> tuple[float | None, float | None]:
        """The canary's p99 TTFT and p99 request duration over the last `window_s` seconds."""
        self._trim(1, now)
        done = self._done[1]
        return quantile([item[1] for item in done], 0.99), quantile([i[5] for i in done], 0.99)

    def _trim(self, revision: int, now: float) -> None:
        horizon = now - self.window_s
        done, errors = self._done[revision], self._errors[revision]
        while done and done[0][0] <= horizon:
            done.popleft()
        while errors and errors[0] <= horizon:
            errors.popleft()

    def _revision(self, revision: int, now: float) -> RevisionMetrics:
        self._trim(revision, now)
        done, errors = self._done[revision], self._errors[revision]
        total = len(done) + len(errors)
        if total == 0:
            return RevisionMetrics()
        prompt = sum(item[4] for item in done)
        ttfts = [item[1] for item in done]
        itls = [item[2] for item in done if not math.isnan(item[2])]
        return RevisionMetrics(
            requests=float(total),
            ttft_p95=quantile(ttfts, 0.95),
            itl_p95=quantile(itls, 0.95),
            error_rate=len(errors) / total,
            cache_hit_rate=sum(item[3] for item in done) / prompt if prompt else None,
            ttft_buckets=histogram(ttfts, m.EMULATED_TTFT_BUCKETS),
            itl_buckets=histogram(itls, m.EMULATED_ITL_BUCKETS),
        )


def histogram(values: Sequence[float], edges: Sequence[float]) -> Histogram:
    """`values` as Prometheus's cumulative `le` buckets at `edges`, plus +Inf."""
    ordered = sorted(values)
    cumulative = [(le, float(bisect.bisect_right(ordered, le))) for le in edges]
    return (*cumulative, (math.inf, float(len(ordered))))


def quantile(values: list[float], q: float) -> float | None:
    """The `q` quantile by linear interpolation (numpy's default); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
