"""The twin's model of smg's per-worker circuit breaker (`radixfleet.twin.breaker`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from radixfleet.twin.breaker import BreakerSettings, CircuitBreaker

SETTINGS = BreakerSettings()  # smg 1.13's defaults: 10 failures, 3 successes, 60 s, 120 s


def _failed(times: int, *, at: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(SETTINGS)
    for _ in range(times):
        breaker.failure(at)
    return breaker


def test_ten_consecutive_failures_open_it_for_sixty_seconds() -> None:
    assert _failed(9).allows(0.0)
    breaker = _failed(10)
    assert breaker.is_open(0.0) and breaker.is_open(59.9)
    assert breaker.allows(60.0)  # half-open: requests may try it again


def test_a_success_between_failures_resets_the_count() -> None:
    breaker = _failed(9)
    breaker.success(0.0)
    breaker.failure(0.0)
    assert breaker.allows(0.0)


def test_failures_further_apart_than_the_window_start_a_new_run() -> None:
    breaker = CircuitBreaker(SETTINGS)
    for second in range(10):
        breaker.failure(second * 20.0)  # 180 s from first to last
    assert breaker.allows(180.0)


def test_half_open_closes_after_three_successes_and_reopens_on_a_failure() -> None:
    breaker = _failed(10)
    breaker.success(30.0)  # a request sent before it opened: no evidence
    for second in (60.0, 61.0):
        breaker.success(second)
    breaker.failure(62.0)
    assert breaker.is_open(62.0) and breaker.is_open(121.0)
    for second in (122.0, 123.0, 124.0):
        breaker.success(second)
    breaker.failure(124.0)  # closed again: one failure is one of ten
    assert breaker.allows(124.0)


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 5)), max_size=60))
def test_it_never_opens_without_ten_failures_in_a_row(events: list[tuple[bool, float]]) -> None:
    breaker, now, run = CircuitBreaker(SETTINGS), 0.0, 0
    for ok, step in events:
        now += step
        if ok:
            breaker.success(now)
            run = 0
        else:
            breaker.failure(now)
            run += 1
        if breaker.is_open(now):
            assert run >= SETTINGS.failure_threshold
            return
