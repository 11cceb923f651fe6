"""Cost-aware scale-to-zero (`memory.break_even`, `sizing.idle`, `sizing.bounds`): zero only
when the model's own idle gaps repay a trip to zero, and never while a rise is forecast."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.controllers.autoscale.cli import describe
from radixfleet.controllers.autoscale.memory import break_even
from radixfleet.controllers.autoscale.sizing import MIN_GAPS, bounds, idle
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import AutoscaleStatus, ColdStarts, Observed

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
# A 60 s cold start and no price on misses: a trip to zero costs 60 replica-seconds.
SPEC = AutoscalePolicySpec.model_validate(
    {"inferenceService": "m", "coldStart": {"seconds": 60, "missCostSeconds": 0}}
)
QUIET = ColdStarts()


def _cost(gaps: list[float], threshold: float | None, trip: float) -> float:
    if threshold is None:
        return sum(gaps) / len(gaps)
    return sum(g if g <= threshold else threshold + trip for g in gaps) / len(gaps)


@pytest.mark.parametrize(
    ("gaps", "idle_seconds", "never"),
    [
        pytest.param([900.0] * 8, 0.0, False, id="long-gaps-zero-at-once"),
        pytest.param([30.0] * 8, None, True, id="gaps-shorter-than-a-cold-start-stay-warm"),
        pytest.param([30.0] * 6 + [3600.0] * 2, 30.0, False, id="bridge-the-short-ones-only"),
    ],
)
def test_the_break_even_of_typical_gaps(
    gaps: list[float], idle_seconds: float | None, never: bool
) -> None:
    found = break_even(SPEC, gaps, QUIET)
    assert (found.idle_seconds, found.never, found.gaps) == (idle_seconds, never, len(gaps))
    assert found.zero_cost_seconds == 60.0


def test_waiting_requests_are_priced_into_a_trip() -> None:
    priced = SPEC.model_copy(update={"cold_start": SPEC.cold_start.model_copy(
        update={"miss_cost_seconds": 10.0})})  # fmt: skip
    bursty = ColdStarts(requests=100, peak_rate=2.0)  # 1 + 2/s x 60 s would wait
    assert break_even(priced, [900.0], bursty).zero_cost_seconds == 60.0 + 10.0 * 121
    assert break_even(priced, [900.0], bursty).never  # 1,270 s of trip > a 900 s gap


@given(st.lists(st.floats(1, 10_000), min_size=1, max_size=32), st.floats(0, 500))
def test_the_chosen_threshold_costs_least(gaps: list[float], miss_cost: float) -> None:
    spec = SPEC.model_copy(update={"cold_start": SPEC.cold_start.model_copy(
        update={"miss_cost_seconds": miss_cost})})  # fmt: skip
    found = break_even(spec, gaps, QUIET)
    trip = found.zero_cost_seconds
    chosen = _cost(gaps, found.idle_seconds, trip)
    for threshold in [None, 0.0, *gaps]:
        assert chosen <= _cost(gaps, threshold, trip) + 1e-6


def _status(gaps: list[float], idle_for: float) -> AutoscaleStatus:
    return AutoscaleStatus(
        inference_service="m",
        gaps=tuple(gaps),
        break_even=break_even(SPEC, gaps, QUIET),
        last_active_at=T0 - timedelta(seconds=idle_for),
    )


def test_a_model_whose_gaps_never_repay_a_trip_stays_warm_through_gaps_like_them() -> None:
    assert not idle(SPEC, _status([30.0] * MIN_GAPS, idle_for=30), T0)
    # Quiet for longer than any gap it has had (and the idle window): nobody uses it any more.
    assert not idle(SPEC, _status([30.0] * MIN_GAPS, idle_for=300), T0)
    assert idle(SPEC, _status([30.0] * MIN_GAPS, idle_for=600), T0)
    assert idle(SPEC, _status([900.0] * MIN_GAPS, idle_for=SPEC.interval_seconds), T0)
    # Too few gaps to learn from: the spec's idle window (600 s) decides.
    assert not idle(SPEC, _status([900.0] * (MIN_GAPS - 1), idle_for=300), T0)
    assert idle(SPEC, _status([900.0] * (MIN_GAPS - 1), idle_for=600), T0)


@given(st.lists(st.floats(1, 10_000), max_size=32), st.floats(0, 1e6), st.floats(0.01, 50))
def test_never_zero_while_a_rise_is_forecast(
    gaps: list[float], idle_for: float, forecast: float
) -> None:
    quiet = Observed(ready=0, replicas=(), revision="m-00001")
    floor, ceiling = bounds(quiet, SPEC, _status(gaps, idle_for), T0, forecast=forecast)
    assert floor >= 1 and ceiling >= floor


@pytest.mark.parametrize(
    ("gaps", "said"),
    [
        pytest.param([], "scale to zero: a trip to zero costs 60 replica-s; no idle gap seen yet",
                     id="no-gap-yet"),
        pytest.param([30.0] * 5, "scale to zero: never (stays warm); a trip to zero costs 60 "
                     "replica-s, mean idle gap 30 s over 5", id="never"),
        pytest.param([900.0] * 5, "scale to zero: after 0 s idle; a trip to zero costs 60 "
                     "replica-s, mean idle gap 900 s over 5", id="at-once"),
    ],
)  # fmt: skip
def test_autoscale_status_says_when_zero_pays(gaps: list[float], said: str) -> None:
    assert said in describe(_status(gaps, idle_for=0))
