"""Tests of `sglang:gen_throughput` as the replica model reports it: SGLang's decode log.

SGLang sets the gauge every DECODE_LOG_INTERVAL decode steps to the tokens decoded since the
previous log over the time since it (scheduler_metrics_mixin.log_decode_stats), and to 0 when
an idle scheduler refreshes its gauges. The autoscaler divides running requests by it to read
the inter-token latency, so a reading that averages in idle time reads a lightly loaded replica
as a busy one.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.replica.stats import DECODE_LOG_INTERVAL, IDLE_REFRESH_S, Counters

STEP_S = 0.007  # one decode step of a small batch (CALIBRATION.md: 6.5 ms + 0.02 ms x B)


def run(counters: Counters, *, batch: int, steps: int, start: float) -> float:
    """`steps` decode steps of `batch` requests from `start`; returns when they end."""
    end = start + steps * STEP_S
    counters.decoded(tokens=batch * steps, steps=steps, start=start, end=end)
    return end


def test_nothing_is_reported_before_the_first_log() -> None:
    counters = Counters(started_at=0.0)
    end = run(counters, batch=4, steps=DECODE_LOG_INTERVAL - 1, start=0.0)
    assert counters.gen_throughput(end) == 0.0


def test_a_busy_replica_reports_its_batch_over_its_step_time() -> None:
    counters = Counters(started_at=0.0)
    end = run(counters, batch=8, steps=1000, start=0.0)
    assert counters.gen_throughput(end) == pytest.approx(8 / STEP_S)


def test_the_first_log_after_idle_time_reads_low_until_the_next() -> None:
    counters = Counters(started_at=0.0)
    end = run(counters, batch=4, steps=DECODE_LOG_INTERVAL, start=0.0)
    back = end + 10.0  # ten idle seconds, inside the span of the next log
    end = run(counters, batch=4, steps=DECODE_LOG_INTERVAL, start=back)
    assert counters.gen_throughput(end) < 0.1 * 4 / STEP_S
    end = run(counters, batch=4, steps=DECODE_LOG_INTERVAL, start=end)
    assert counters.gen_throughput(end) == pytest.approx(4 / STEP_S)


def test_idle_past_the_refresh_reports_zero() -> None:
    counters = Counters(started_at=0.0)
    end = run(counters, batch=4, steps=200, start=0.0)
    assert counters.gen_throughput(end + IDLE_REFRESH_S - 1) == pytest.approx(4 / STEP_S)
    assert counters.gen_throughput(end + IDLE_REFRESH_S + 1) == 0.0


@given(
    st.lists(
        st.tuples(st.integers(1, 120), st.integers(1, 32), st.floats(0.0, 2.0)),
        min_size=1,
        max_size=12,
    )
)
def test_the_reading_does_not_depend_on_how_runs_are_cut(
    runs: list[tuple[int, int, float]],
) -> None:
    """The twin plays many steps at once, the emulator a few: both must log as SGLang does,
    one step at a time. Each run is (steps, batch, idle seconds before it)."""
    whole, single = Counters(started_at=0.0), Counters(started_at=0.0)
    now = 0.0
    for steps, batch, idle in runs:
        start = now + idle
        now = run(whole, batch=batch, steps=steps, start=start)
        for step in range(steps):
            run(single, batch=batch, steps=1, start=start + step * STEP_S)
        assert whole.gen_throughput(now) == pytest.approx(single.gen_throughput(now), rel=1e-6)
