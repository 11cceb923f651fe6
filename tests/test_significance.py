"""The canary judge's significance tests: known values, behaviour under the null, invariants."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.metrics_names import EMULATED_TTFT_BUCKETS
from radixfleet.significance import bin_counts, fisher_greater, mann_whitney_greater
from radixfleet.twin.metrics import histogram

EDGES = (0.05, 0.1, 0.2, 0.4, 0.8)


def hist(counts: list[float]) -> tuple[tuple[float, float], ...]:
    """Per-bin counts as cumulative `le` buckets at EDGES plus +Inf."""
    cumulative, total = [], 0.0
    for le, count in zip((*EDGES, math.inf), counts, strict=True):
        total += count
        cumulative.append((le, total))
    return tuple(cumulative)


def brute_fisher(a: int, n_a: int, b: int, n_b: int) -> float:
    errors, n = a + b, n_a + n_b
    return sum(
        math.comb(errors, k) * math.comb(n - errors, n_a - k)
        for k in range(a, min(errors, n_a) + 1)
    ) / math.comb(n, n_a)


def test_fisher_known_value() -> None:
    # 3 errors, all on A's 10 requests, none on B's 10: C(10,3) / C(20,3) = 120 / 1140.
    assert fisher_greater(3, 10, 0, 10) == pytest.approx(120 / 1140)


@given(st.integers(0, 40), st.integers(1, 40), st.integers(0, 40), st.integers(1, 40))
def test_fisher_matches_the_hypergeometric_tail(a: int, n_a: int, b: int, n_b: int) -> None:
    a, b = min(a, n_a), min(b, n_b)
    assert fisher_greater(a, n_a, b, n_b) == pytest.approx(brute_fisher(a, n_a, b, n_b), rel=1e-9)


def test_fisher_five_percent_errors_against_none_is_significant_on_a_minute_of_traffic() -> None:
    # A 5% canary at 5% of 30 req/s for 60 s (90 requests, ~4-5 errors) against 1,700 clean.
    assert fisher_greater(5, 90, 0, 1700) < 0.001
    # One error in 90 against none: noise.
    assert fisher_greater(1, 90, 0, 1700) > 0.01


def test_mann_whitney_separates_a_twice_slower_canary() -> None:
    rng = random.Random(7)
    stable = [rng.lognormvariate(math.log(0.07), 0.4) for _ in range(600)]
    slow = [2 * rng.lognormvariate(math.log(0.07), 0.4) for _ in range(60)]
    p = mann_whitney_greater(histogram(slow, EDGES), histogram(stable, EDGES))
    assert p is not None and p < 1e-6


def test_the_minimum_effect_is_the_null_hypothesis() -> None:
    """Against 1.25x the stable revision, a canary 10% slower is not significant however many
    requests it served, and one twice as slow still is on a minute of 5% traffic."""
    rng = random.Random(5)

    def sample(factor: float, n: int) -> tuple[tuple[float, float], ...]:
        values = [factor * rng.lognormvariate(math.log(0.07), 0.4) for _ in range(n)]
        return histogram(values, EMULATED_TTFT_BUCKETS)

    stable = sample(1.0, 20_000)
    near = sample(1.1, 5_000)
    near_p = mann_whitney_greater(near, stable)
    assert near_p is not None and near_p < 1e-6  # 10% slower is real...
    near_scaled = mann_whitney_greater(near, stable, scale=1.25)
    assert near_scaled is not None and near_scaled > 0.5  # ...and below the minimum effect
    slow = mann_whitney_greater(sample(2.0, 90), sample(1.0, 1700), scale=1.25)
    assert slow is not None and slow < 1e-4


def test_scale_one_on_aligned_buckets_counts_a_shared_bucket_as_ties() -> None:
    same = hist([10, 20, 30, 0, 0, 0])
    p = mann_whitney_greater(same, same)
    assert p is not None and 0.45 < p < 0.55


def test_mann_whitney_is_one_sided() -> None:
    faster, slower = hist([30, 10, 0, 0, 0, 0]), hist([0, 0, 10, 30, 0, 0])
    assert mann_whitney_greater(slower, faster) == pytest.approx(0, abs=1e-9)
    assert mann_whitney_greater(faster, slower) == pytest.approx(1, abs=1e-9)


@pytest.mark.parametrize(
    ("canary", "stable"),
    [
        pytest.param(hist([0, 0, 0, 0, 0, 0]), hist([1, 2, 3, 0, 0, 0]), id="empty-canary"),
        pytest.param(hist([1, 2, 3, 0, 0, 0]), hist([0, 0, 0, 0, 0, 0]), id="empty-stable"),
    ],
)
def test_mann_whitney_has_no_answer_without_comparable_data(
    canary: tuple[tuple[float, float], ...], stable: tuple[tuple[float, float], ...]
) -> None:
    assert mann_whitney_greater(canary, stable) is None


def test_mann_whitney_false_positive_rate_under_the_null_is_at_most_its_level() -> None:
    """Same distribution on both sides, 60 against 600 samples, 2,000 windows: the share called
    significant at 5% stays near 5% (the binned, tie-corrected test is, if anything, cautious)."""
    rng = random.Random(11)
    significant = 0
    for _ in range(2000):
        canary = [rng.lognormvariate(math.log(0.1), 0.5) for _ in range(60)]
        stable = [rng.lognormvariate(math.log(0.1), 0.5) for _ in range(600)]
        p = mann_whitney_greater(histogram(canary, EDGES), histogram(stable, EDGES))
        assert p is not None
        significant += p < 0.05
    assert significant / 2000 < 0.065


bins = st.lists(st.integers(0, 50), min_size=6, max_size=6)


@given(bins, bins)
def test_mann_whitney_is_a_probability(canary: list[int], stable: list[int]) -> None:
    p = mann_whitney_greater(hist([float(c) for c in canary]), hist([float(s) for s in stable]))
    assert p is None or 0.0 <= p <= 1.0
    assert (p is None) == (sum(canary) == 0 or sum(stable) == 0)


@given(bins, bins, st.integers(0, 4))
def test_moving_canary_requests_slower_never_makes_it_look_better(
    canary: list[int], stable: list[int], from_bin: int
) -> None:
    if not sum(stable) or not canary[from_bin]:
        return
    slower = list(canary)
    slower[from_bin] -= 1
    slower[from_bin + 1] += 1
    before = mann_whitney_greater(
        hist([float(c) for c in canary]), hist([float(s) for s in stable])
    )
    after = mann_whitney_greater(hist([float(c) for c in slower]), hist([float(s) for s in stable]))
    assert before is not None and after is not None
    assert after <= before + 1e-12


def test_bin_counts_tolerate_extrapolation_dips() -> None:
    # increase() extrapolates each bucket's series alone: a cumulative count may dip a little.
    assert bin_counts(((0.1, 2.0), (0.2, 1.9), (math.inf, 4.0))) == [2.0, 0.0, 2.0]


@given(bins, bins, st.floats(1.0, 3.0), st.floats(0.0, 1.0))
def test_a_larger_minimum_effect_never_makes_a_canary_look_worse(
    canary: list[int], stable: list[int], scale: float, more: float
) -> None:
    a, b = hist([float(c) for c in canary]), hist([float(s) for s in stable])
    low = mann_whitney_greater(a, b, scale=scale)
    high = mann_whitney_greater(a, b, scale=scale + more)
    assert (low is None) == (high is None)
    if low is not None and high is not None and scale > 1.0:
        assert high >= low - 1e-9
