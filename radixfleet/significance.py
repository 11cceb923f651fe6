"""One-sided significance tests for comparing a canary with its stable revision over a window.

The canary judge asks one question per check: is the canary *worse* than the stable revision by
more than noise explains? A p95 on a few dozen requests is noise-driven (its value rests on the
two or three slowest requests), so the judge compares whole distributions instead:

- Latency, from Prometheus histograms: Mann-Whitney U on the binned samples (Kayenta's test),
  with the tie correction that binning needs. Its p-value is the chance that two revisions with
  the same latency distribution would put the canary this far above the stable one.
- Error rate, from counts: Fisher's exact test on the 2x2 table of errors and successes (exact
  for the small counts of a 5% canary, where a normal approximation is poor).

Standard library only: the decision layer imports it, and the fleet twin runs it in virtual time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: A histogram over one window: (upper bound `le`, cumulative count), in increasing `le`, with
#: the last bound +Inf, as `sum by (le) (increase(x_bucket[w]))` gives it.
Buckets = Sequence[tuple[float, float]]


def bin_counts(buckets: Buckets) -> list[float]:
    """Per-bin counts of a cumulative histogram (Prometheus's `le` buckets)."""
    counts, below = [], 0.0
    for _, cumulative in buckets:
        # increase() extrapolates each series on its own, so a cumulative count may dip by a
        # fraction below the previous bound's; such a bin holds nothing.
        counts.append(max(0.0, cumulative - below))
        below = max(below, cumulative)
    return counts


def mann_whitney_greater(canary: Buckets, stable: Buckets, *, scale: float = 1.0) -> float | None:
    """The one-sided p-value that the canary's values are stochastically greater than `scale`
    times the stable's (Mann-Whitney U, normal approximation with continuity correction); None
    when a side is empty.

    `scale` is the minimum effect: with 1.25 the null hypothesis is "the canary is at most
    1.25x slower", so a canary 10% slower is not significant however many requests it served.
    Values are spread evenly within their bucket (the +Inf bucket sits at its lower bound), and
    a pair within one shared bucket counts as a tie. The variance is tie-corrected when the
    buckets line up (scale 1, same bounds) and the untied one otherwise, which is larger: the
    test then errs towards "not significant", never towards a false rollback.
    """
    a, b = bin_counts(canary), bin_counts(stable)
    n1, n2 = sum(a), sum(b)
    if n1 <= 0 or n2 <= 0:
        return None
    canary_bins = _intervals(canary, 1.0)
    stable_bins = _intervals(stable, scale)
    # U: the expected number of (canary, stable) pairs with the canary above.
    u = sum(
        ca * cb * _above(x, y)
        for ca, x in zip(a, canary_bins, strict=True)
        if ca
        for cb, y in zip(b, stable_bins, strict=True)
        if cb
    )
    n = n1 + n2
    aligned = scale == 1.0 and [le for le, _ in canary] == [le for le, _ in stable]
    ties = sum((t := x + y) ** 3 - t for x, y in zip(a, b, strict=True)) if aligned else 0.0
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:  # every value in one bin: no evidence either way
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return _upper_tail(z)


def _intervals(buckets: Buckets, scale: float) -> list[tuple[float, float]]:
    """Each bucket's value range, times `scale`; the +Inf bucket is its lower bound alone."""
    out, low = [], 0.0
    for le, _ in buckets:
        high = low if math.isinf(le) else le
        out.append((low * scale, high * scale))
        low = high
    return out


def _above(x: tuple[float, float], y: tuple[float, float]) -> float:
    """P(X > Y) for X, Y uniform on the ranges x and y (a range of width 0 is a point), a tie
    counting one half."""
    (x0, x1), (y0, y1) = x, y
    if x1 <= y0:
        return 0.5 if x0 == x1 == y0 == y1 else 0.0
    if x0 >= y1:
        return 0.5 if x0 == x1 == y0 == y1 else 1.0
    if x1 == x0:
        return _cdf(x0, y0, y1)
    return (_cdf_integral(x1, y0, y1) - _cdf_integral(x0, y0, y1)) / (x1 - x0)


def _cdf(t: float, y0: float, y1: float) -> float:
    if y1 == y0:
        return 0.5 if t == y0 else float(t > y0)
    return min(1.0, max(0.0, (t - y0) / (y1 - y0)))


def _cdf_integral(t: float, y0: float, y1: float) -> float:
    """The integral of Y's CDF from -inf to t."""
    if t <= y0:
        return 0.0
    width = y1 - y0
    if t <= y1:
        return (t - y0) ** 2 / (2 * width)
    return width / 2 + (t - y1)


def fisher_greater(errors_a: int, total_a: int, errors_b: int, total_b: int) -> float | None:
    """The one-sided p-value of Fisher's exact test that A's error rate exceeds B's: the chance,
    with both sharing one rate, that A would hold at least `errors_a` of the errors."""
    if total_a <= 0 or total_b <= 0:
        return None
    errors_a, errors_b = min(errors_a, total_a), min(errors_b, total_b)
    errors, n = errors_a + errors_b, total_a + total_b
    top = min(errors, total_a)
    log_norm = _log_comb(n, total_a)
    return min(1.0, sum(
        math.exp(_log_comb(errors, k) + _log_comb(n - errors, total_a - k) - log_norm)
        for k in range(errors_a, top + 1)
    ))  # fmt: skip


def _log_comb(n: int, k: int) -> float:
    if k < 0 or k > n:
        return -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _upper_tail(z: float) -> float:
    """P(Z >= z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))
