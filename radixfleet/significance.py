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


def mann_whitney_greater(canary: Buckets, stable: Buckets) -> float | None:
    """The one-sided p-value that the canary's values are stochastically greater than the
    stable's, by the normal approximation to Mann-Whitney U with tie correction and continuity
    correction; None when the two histograms have different bounds or a side is empty."""
    if [le for le, _ in canary] != [le for le, _ in stable]:
        return None
    a, b = bin_counts(canary), bin_counts(stable)
    n1, n2 = sum(a), sum(b)
    if n1 <= 0 or n2 <= 0:
        return None
    # U counts the pairs (canary, stable) with the canary above, ties as halves: all values
    # of one bin are tied with each other.
    u, stable_below = 0.0, 0.0
    for in_canary, in_stable in zip(a, b, strict=True):
        u += in_canary * (stable_below + in_stable / 2)
        stable_below += in_stable
    n = n1 + n2
    ties = sum((t := x + y) ** 3 - t for x, y in zip(a, b, strict=True))
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:  # every value in one bin: no evidence either way
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return _upper_tail(z)


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
