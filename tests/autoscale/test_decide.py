"""The autoscaling decision: parametrised cases, then Hypothesis for its invariants.

Invariants: never below the floor nor above the ceiling; never to zero while a request is in
sight; missing or NaN metrics hold the count (inside the bounds) rather than move it; noise
within the tolerance moves nothing; no ready replica goes within the scale-down window of a
scale-up, and one still starting only when no recommendation of the scale-up window needs it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.controllers.autoscale.decide import Decision, decide, due
from radixfleet.controllers.autoscale.demand import forecast
from radixfleet.controllers.autoscale.sizing import recommend, stabilize, take_back
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    ColdStarts,
    Learned,
    Observed,
    ReplicaMetrics,
    Sample,
    Verb,
)
from radixfleet.controllers.autoscale.victims import choose_victims

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday, noon UTC
NAN = math.nan


def spec(**fields: Any) -> AutoscalePolicySpec:
    return AutoscalePolicySpec.model_validate({"inferenceService": "llama", **fields})


def replicas(
    n: int,
    *,
    kv: float = 0.5,
    running: float = 10,
    queued: float = 0,
    cached: float = 0,
    gen_throughput: float | None = None,
) -> tuple[ReplicaMetrics, ...]:
    return tuple(
        ReplicaMetrics(
            f"pod-{i}",
            running=running,
            queued=queued,
            kv_usage=kv,
            cached_tokens_rate=cached,
            gen_throughput=None if gen_throughput is None else gen_throughput / n,
        )
        for i in range(n)
    )


def observed(n: int, **fields: Any) -> Observed:
    names = ("kv", "running", "queued", "cached", "gen_throughput")
    gauges = {k: fields.pop(k) for k in names if k in fields}
    fields.setdefault("revision", "llama-00001")
    return Observed(ready=n, replicas=replicas(n, **gauges), **fields)


def status(desired: int, **fields: Any) -> AutoscaleStatus:
    fields.setdefault("last_active_at", T0)
    fields.setdefault("last_tick_at", T0 - timedelta(seconds=10))
    fields.setdefault("revision", "llama-00001")
    return AutoscaleStatus(inference_service="llama", desired=desired, **fields)


# Five minutes of recommendations of zero: a scale-down window's worth of evidence.
ZEROS = tuple(Sample(at=T0 - timedelta(seconds=s), value=0.0) for s in range(300, 0, -10))


def run(
    ticks: list[Observed], policy: AutoscalePolicySpec, start: AutoscaleStatus | None = None
) -> list[Decision]:
    """Decide on each observation in turn, every `intervalSeconds`, carrying the status."""
    decisions, current = [], start
    for i, seen in enumerate(ticks):
        decision = decide(
            seen, policy, current, T0 + timedelta(seconds=policy.interval_seconds * i)
        )
        decisions.append(decision)
        current = decision.status
    return decisions


# ---- cases ---------------------------------------------------------------------------------

HALTS = {
    "prometheus down": Observed(ready=3, replicas=replicas(3), metrics_error="Prometheus failed"),
    "NaN KV usage": observed(3, kv=NAN),
    "missing queue gauge": Observed(
        ready=2, replicas=(*replicas(1), ReplicaMetrics("pod-x", 1, None, 0.5))
    ),
    "a ready replica without metrics": Observed(ready=4, replicas=replicas(3)),
}


@pytest.mark.parametrize("seen", HALTS.values(), ids=HALTS.keys())
def test_missing_metrics_halt_and_hold(seen: Observed) -> None:
    decision = decide(seen, spec(), status(4, revision=seen.revision), T0)
    assert decision.verb is Verb.HALT
    assert decision.desired == 4
    assert decision.warning


def test_halt_while_idle_does_not_scale_to_zero() -> None:
    long_idle = status(2, last_active_at=T0 - timedelta(hours=5))
    decision = decide(observed(2, kv=NAN), spec(), long_idle, T0)
    assert (decision.verb, decision.desired) == (Verb.HALT, 2)


LONG_BATCH = {"targets": {"runningPerReplica": 1000}}  # keeps the batch signal out of the way

SCALE_CASES = {
    # name: (observation, policy fields, reference count, expected desired)
    "kv usage over target": (observed(4, kv=0.9, running=20), {}, 4, 6),
    "kv usage at target": (observed(4, kv=0.7, running=20), {}, 4, 4),
    "within tolerance": (observed(4, kv=0.72, running=20), {}, 4, 4),
    # 56 queued beyond the allowance, each at 0.035 of a replica's KV: (1.4 + 1.96) / 0.7
    "queue priced at the KV footprint": (
        observed(2, kv=0.7, running=20, queued=30),
        LONG_BATCH,
        2,
        5,
    ),
    "waiting upstream priced at the KV footprint": (
        observed(2, kv=0.7, running=20, waiting=56),
        LONG_BATCH,
        2,
        5,
    ),
    # a backlog at 20 running (both replicas backlogged at the last tick too): 80% of that
    # per replica, queue included: (40 + 56) / 16
    "queue priced at the learned batch": (
        observed(2, kv=0.1, running=20, queued=30),
        {},
        status(2, backlogged=("pod-0", "pod-1")),
        6,
    ),
    "running requests over the set batch": (
        observed(2, kv=0.2, running=60),
        {"targets": {"runningPerReplica": 40}},
        2,
        3,
    ),
    # 600 running at 7,500 tokens/s: 80 ms between tokens against an aim of 40 ms, floor 10:
    # utilisation 0.875 now, 0.75 at the aim
    "inter-token latency over the aim": (
        observed(6, kv=0.2, running=100, gen_throughput=7500.0),
        {"targets": {"itlFloorMs": 10, "itlFraction": 0.8}},
        6,
        7,
    ),
    "inter-token latency well under the aim": (
        observed(6, kv=0.2, running=20, gen_throughput=12000.0),
        {"targets": {"itlFloorMs": 5}, "scaleDown": {"stabilizationSeconds": 0}},
        6,
        5,
    ),
    "scale-up limited per tick": (observed(2, kv=1.0, running=100, queued=500), {}, 2, 6),
    "latency over the SLO pushes up": (observed(4, kv=0.5, ttft_p95=2.0), {}, 4, 8),
    "ceiling of the InferenceService": (observed(4, kv=0.95, running=50, ceiling=5), {}, 4, 5),
}


@pytest.mark.parametrize(
    ("seen", "fields", "reference", "expected"), SCALE_CASES.values(), ids=SCALE_CASES
)
def test_scaling_on_signals(
    seen: Observed, fields: dict[str, Any], reference: int | AutoscaleStatus, expected: int
) -> None:
    before = status(reference) if isinstance(reference, int) else reference
    decision = decide(seen, spec(**fields), before, T0)
    assert decision.desired == expected, decision.reason


def test_saturation_batch_is_learned_from_a_backlog_that_lasts_two_ticks() -> None:
    first = decide(observed(2, running=50, queued=20), spec(), status(2), T0)
    assert first.status.learned.batch is None
    assert first.status.backlogged == ("pod-0", "pod-1")
    later = T0 + timedelta(seconds=10)
    second = decide(observed(2, running=50, queued=20), spec(), first.status, later)
    assert second.status.learned.batch == 50
    blip = decide(observed(2, running=50, queued=3), spec(), first.status, later)
    assert blip.status.learned.batch is None  # 3 queued behind 50 running is a routing blip
    assert blip.status.backlogged == ()


def test_a_queue_behind_one_prefill_teaches_no_batch() -> None:
    """Requests that arrive during a long prefill wait for the next prefill batch, at any
    running batch; they are admitted by the next tick. Seen on the twin's Azure trace at 45
    req/s: a queue of three or more behind 27 running at 7% KV taught a batch of 27."""
    ticks = [observed(5, kv=0.07, running=27, queued=q) for q in (0, 4, 0, 4, 0, 4)]
    current = status(5)
    for i, seen in enumerate(ticks):
        current = decide(seen, spec(), current, T0 + timedelta(seconds=10 * i)).status
    assert current.learned.batch is None


@pytest.mark.parametrize(
    ("fields", "window_s"),
    [
        pytest.param({}, 300, id="default-300s"),
        pytest.param({"scaleDown": {"stabilizationSeconds": 120}}, 120, id="chosen-120s"),
    ],
)
def test_scale_down_waits_for_the_window_then_steps(fields: dict[str, Any], window_s: int) -> None:
    policy = spec(intervalSeconds=10, **fields)
    assert policy.scale_down.stabilization_seconds == window_s
    desired, current, count = [], status(8), 8
    for i in range(60):
        seen = observed(count, kv=0.8 / count, running=2)  # 1.14 replicas of KV in all
        decision = decide(seen, policy, current, T0 + timedelta(seconds=10 * i))
        current, count = decision.status, decision.desired
        desired.append(count)
    window_ticks = policy.scale_down.stabilization_seconds // policy.interval_seconds
    # a whole window of lower recommendations first (the first tick's is one of them)
    assert desired[: window_ticks - 1] == [8] * (window_ticks - 1)
    assert desired[window_ticks - 1] < 8  # and not a tick more
    assert desired[-1] == 2
    # then a quarter of the replicas (at least one) per 30 s
    steps = [(i, a - b) for i, (a, b) in enumerate(itertools.pairwise(desired)) if b < a]
    assert all(removed <= max(1, 8 // 4) for _, removed in steps)
    assert all(b - a >= 3 for (a, _), (b, _) in itertools.pairwise(steps))


def window_of(values: list[int], *, end: datetime = T0) -> tuple[Sample, ...]:
    """Recommendations 10 s apart, the last one at `end`."""
    start = end - timedelta(seconds=10 * (len(values) - 1))
    return tuple(
        Sample(at=start + timedelta(seconds=10 * i), value=v) for i, v in enumerate(values)
    )


@pytest.mark.parametrize(
    ("smoothing", "expected"),
    [pytest.param(60, 5, id="minute-means-one-more"), pytest.param(0, 7, id="instants-its-height")],
)
def test_one_noisy_tick_in_the_window_holds_no_replica_once_smoothed(
    smoothing: int, expected: int
) -> None:
    # Five minutes of a load of four replicas, one reading of which said seven: it holds one
    # replica more for the minute it is in, not three for the window.
    values = [4] * 36
    values[20] = 7
    policy = spec(scaleDown={"smoothingSeconds": smoothing})
    assert stabilize(7, window_of(values), policy, T0) == expected


def test_a_minute_of_higher_recommendations_in_the_window_holds_them() -> None:
    values = [4] * 36
    values[14:21] = [5] * 7  # a minute of five, two minutes ago
    assert stabilize(5, window_of(values), spec(), T0) == 5


def test_the_smoothing_never_holds_a_scale_up_back() -> None:
    # A burst: four minutes of one replica, then two ticks asking for six.
    values = [1] * 24 + [6, 6]
    assert stabilize(1, window_of(values), spec(), T0) == 6


def test_nothing_added_by_a_scale_up_goes_within_the_window() -> None:
    values = [4] * 36  # the fifth replica came from a floor (a warm pool's schedule) 90 s ago
    raised = T0 - timedelta(seconds=90)
    assert stabilize(5, window_of(values), spec(), T0, raised_at=raised) == 5
    later = T0 + timedelta(seconds=240)
    assert stabilize(5, window_of([*values, *[4] * 24], end=later), spec(), later,
                     raised_at=raised) == 4  # fmt: skip


def starting(ready: int, on_the_way: int, **fields: Any) -> Observed:
    """`ready` replicas serving and `on_the_way` more ordered, not ready yet."""
    return dataclasses.replace(observed(ready, **fields), starting=on_the_way)


@pytest.mark.parametrize(
    ("ready", "on_the_way", "recent", "kept"),
    [
        pytest.param(1, 1, [2, 2, 1, 1, 1], 1, id="burst-over-the-starting-one-goes"),
        pytest.param(1, 1, [2, 2, 2, 1, 1], None, id="needed-within-the-up-window-kept"),
        pytest.param(2, 3, [5, 5, 3, 3, 3], 3, id="down-to-what-the-window-needs"),
        pytest.param(0, 1, [1, 0, 0, 0, 0], None, id="a-wake-from-zero-is-never-taken-back"),
        pytest.param(3, 0, [5, 1, 1, 1, 1], None, id="ready-replicas-are-the-windows-to-keep"),
    ],
)
def test_replicas_still_starting_are_taken_back_once_their_demand_is_gone(
    ready: int, on_the_way: int, recent: list[int], kept: int | None
) -> None:
    # recommendations 10 s apart; the scale-up window (20 s) holds the last three
    seen = starting(ready, on_the_way)
    assert take_back(seen, seen.current, window_of(recent), spec(), T0) == kept


def test_a_burst_over_before_its_second_replica_is_ready_does_not_keep_it_a_window() -> None:
    """scale-to-zero-bursts' shape: a burst's rise ordered a second replica; the burst ended
    while it started. The decision takes it back (and no ready replica) instead of keeping it
    for the 300 s scale-down window."""
    raised = T0 - timedelta(seconds=40)
    before = status(2, last_scale_up_at=raised, recommendations=window_of([1] * 20 + [2, 2]))
    quiet = starting(1, 1, kv=0.05, running=1, arrival_rate=0.02)
    first = decide(quiet, spec(), before, T0 + timedelta(seconds=10))
    assert first.desired == 2  # the burst's last recommendation is still in the up window
    later = decide(quiet, spec(), first.status, T0 + timedelta(seconds=30))
    assert later.verb is Verb.SCALE_DOWN and later.desired == 1, later.reason
    assert later.reason.endswith("taking back replicas not ready yet: no recommendation of the "
                                 "last 20 s needs them")  # fmt: skip
    ready_now = observed(2, kv=0.05, running=1, arrival_rate=0.02)  # had it come up in time
    assert decide(ready_now, spec(), first.status, T0 + timedelta(seconds=30)).desired == 2


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 8),
    st.integers(0, 8),
    st.lists(st.integers(0, 20), min_size=1, max_size=12),
    st.sampled_from([0, 20, 60]),
)
def test_take_back_keeps_every_ready_replica_and_what_the_up_window_asked_for(
    ready: int, on_the_way: int, recent: list[int], up_window: int
) -> None:
    seen, policy = starting(ready, on_the_way), spec(scaleUp={"stabilizationSeconds": up_window})
    recommendations = window_of(recent)
    kept = take_back(seen, seen.current, recommendations, policy, T0)
    asked = [s.value for s in recommendations if T0 - s.at <= timedelta(seconds=up_window)]
    if kept is None:  # nothing taken back
        return
    assert ready <= kept < seen.current
    assert kept >= max(asked)
    assert ready > 0  # a wake from zero is never taken back


def test_idle_model_scales_to_zero_only_after_the_idle_window() -> None:
    policy = spec(idleSeconds=600)
    last_request = T0 - timedelta(seconds=590)
    start = status(1, last_active_at=last_request, recommendations=ZEROS)
    idle = Observed(
        ready=1, replicas=replicas(1, kv=0.0, running=0), revision="llama-00001", arrival_rate=0.0
    )
    decisions = run([idle] * 3, policy, start)
    assert [d.desired for d in decisions] == [1, 0, 0]


@pytest.mark.parametrize(
    "busy",
    [{"waiting": 1.0}, {"arrival_rate": 0.01}, {"queued": 1.0}, {"running": 1.0}],
    ids=["waiting upstream", "arrivals", "queued", "running"],
)
def test_never_to_zero_with_a_request_in_sight(busy: dict[str, float]) -> None:
    gauges = {"kv": 0.0, "running": 0.0, "queued": 0.0}
    gauges.update({k: v for k, v in busy.items() if k in gauges})
    others = {k: v for k, v in busy.items() if k not in gauges}
    seen = observed(1, **gauges, **others)
    long_idle = status(1, last_active_at=T0 - timedelta(hours=3))
    assert decide(seen, spec(), long_idle, T0).desired >= 1


def test_wake_from_zero_on_waiting_requests() -> None:
    at_zero = Observed(ready=0, waiting=40.0, revision="llama-00001")
    decision = decide(at_zero, spec(), status(0, last_active_at=T0 - timedelta(hours=1)), T0)
    assert decision.verb is Verb.SCALE_UP
    # 40 waiting at the fallback price (1/16 of a replica each) ask for 2.5 replicas
    assert decision.desired == 3


@pytest.mark.parametrize(("waiting", "expected"), [(40.0, 1), (800.0, 2)], ids=["40", "800"])
def test_a_wake_prices_the_waiting_requests_at_their_learned_kv_footprint(
    waiting: float, expected: int
) -> None:
    """Once a running request's KV footprint is known (here 0.1% of a replica), requests held
    upstream are priced at it: 40 that waited on a cold start fit in the first replica, where
    the guess of 16 a replica ordered three (the sparse-sessions scenario's wakes took two or
    three replicas for minutes); 800 need two replicas' worth of KV at the 70% target."""
    at_zero = Observed(ready=0, waiting=waiting, revision="llama-00001")
    learned = Learned(footprint=0.001)
    before = status(0, last_active_at=T0 - timedelta(hours=1), learned=learned)
    assert decide(at_zero, spec(), before, T0).desired == expected


def test_spent_cold_start_budget_keeps_one_replica_warm() -> None:
    spent = ColdStarts(requests=1000, waited=50)  # 5% waited on a cold start, budget 1%
    idle_for = T0 - timedelta(seconds=1200)  # past the 600 s idle window, within the hour
    idle = Observed(ready=1, replicas=replicas(1, kv=0.0, running=0), revision="llama-00001")
    kept = status(1, cold=spent, last_active_at=idle_for, recommendations=ZEROS)
    assert decide(idle, spec(), kept, T0).desired == 1
    fine = status(
        1, cold=ColdStarts(requests=1000, waited=5), last_active_at=idle_for, recommendations=ZEROS
    )
    assert decide(idle, spec(), fine, T0).desired == 0


def test_bursty_model_stays_warm_when_one_more_wake_would_overspend_the_budget() -> None:
    idle = Observed(ready=1, replicas=replicas(1, kv=0.0, running=0), revision="llama-00001")
    idle_for = T0 - timedelta(seconds=1200)
    # 1000 requests, none waited; a burst at 5 req/s through a 90 s cold start: 450 would
    bursty = ColdStarts(requests=1000, waited=0, peak_rate=5.0)
    kept = status(1, cold=bursty, last_active_at=idle_for, recommendations=ZEROS)
    assert decide(idle, spec(), kept, T0).desired == 1
    # ... unless the memory has passed since the last request
    long_ago = kept.model_copy(update={"last_active_at": T0 - timedelta(seconds=3600)})
    assert decide(idle, spec(), long_ago, T0).desired == 0
    # a model that trickles (peak 0.01 req/s in a busy history) may go to zero
    steady = ColdStarts(requests=100_000, waited=0, peak_rate=0.01)
    quiet = status(1, cold=steady, last_active_at=idle_for, recommendations=ZEROS)
    assert decide(idle, spec(), quiet, T0).desired == 0


def test_requests_at_zero_count_as_cold_start_waits() -> None:
    at_zero = Observed(ready=0, arrival_rate=2.0, revision="llama-00001")
    decision = decide(at_zero, spec(), status(0), T0)
    assert decision.status.cold.waited == pytest.approx(20.0)
    assert decision.status.cold.share == pytest.approx(1.0)


def test_schedule_floor() -> None:
    policy = spec(warmPool={"schedule": [{"start": "11:00", "end": "13:00", "minReplicas": 3}]})
    idle = Observed(ready=0, revision="llama-00001")
    quiet = status(0, last_active_at=T0 - timedelta(days=1))
    assert decide(idle, policy, quiet, T0).desired == 3
    assert decide(idle, policy, quiet, T0 + timedelta(hours=2)).desired == 0


def test_predictive_scales_ahead_of_a_rising_rate() -> None:
    # five minutes of a rate rising 1 req/s a minute to 10 req/s: 1.5 more one cold start (90 s)
    # ahead of the recent level
    ages = range(300, 0, -10)
    rates = tuple(Sample(at=T0 - timedelta(seconds=a), value=10.0 - a / 60) for a in ages)
    start = status(5, rates=rates)
    seen = observed(5, kv=0.7, running=35, arrival_rate=10.0)
    decision = decide(seen, spec(maxReplicas=20), start, T0)
    level = (10.0 - 20 / 60 + 10.0 - 10 / 60 + 10.0) / 3
    assert decision.status.demand.predicted == pytest.approx(5 * (level + 1.5) / level, rel=0.01)
    assert decision.desired == 6


def test_rate_over_what_a_replica_serves_wakes_and_scales() -> None:
    ages = range(300, 0, -10)
    rates = tuple(Sample(at=T0 - timedelta(seconds=a), value=10.0 - a / 60) for a in ages)
    start = status(0, rates=rates, learned=Learned(replica_rps=2.0))
    at_zero = Observed(ready=0, arrival_rate=10.0, revision="llama-00001")
    decision = decide(at_zero, spec(maxReplicas=20), start, T0)
    assert decision.status.demand.rate == pytest.approx(5.0)
    assert decision.status.demand.predicted > 5.0
    assert decision.desired == 4  # from zero: the first step is at most four


def test_replica_capacity_is_learned_only_within_the_targets() -> None:
    calm = observed(4, kv=0.7 * 0.75, running=20, arrival_rate=30.0)  # 3 replicas of KV
    learned = decide(calm, spec(), status(4), T0).status.learned
    assert learned.replica_rps == pytest.approx(10.0)
    swamped = observed(2, kv=0.7 * 1.5, running=20, arrival_rate=30.0)  # 3 replicas on 2
    assert decide(swamped, spec(), status(2), T0).status.learned.replica_rps is None


def test_replica_capacity_is_not_learned_from_small_batches() -> None:
    """Batches of four read through the rough ITL estimate (a join since SGLang's last decode
    log makes it a quarter slow): the sparse-sessions scenario's 0.8 req/s taught 1.0 req/s a
    replica, and each session then ordered a second one."""
    # 4 running on one replica at 1 ms/token each over its floor: the ITL signal says 0.6
    trickle = observed(1, kv=0.01, running=4, gen_throughput=4 / 0.0146, arrival_rate=0.8)
    floor = spec(targets={"itlFloorMs": 6.3})
    decision = decide(trickle, floor, status(1), T0)
    assert decision.status.demand.itl > 0.5  # the signal is there, and binding
    assert decision.status.learned.replica_rps is None
    busy = observed(1, kv=0.01, running=8, gen_throughput=8 / 0.0146, arrival_rate=0.8)
    assert decide(busy, floor, status(1), T0).status.learned.replica_rps is not None


def itl_tick(milliseconds: float) -> Observed:
    """Five replicas of 20 running requests whose ITL estimate reads `milliseconds`."""
    return observed(5, kv=0.1, running=20, gen_throughput=5 * 20 / (milliseconds / 1000.0))


ITL_SPEC = spec(targets={"itlFloorMs": 8})


def test_one_ticks_high_itl_estimate_moves_no_demand() -> None:
    """SGLang sets its throughput gauge every 40 decode steps, so the estimate jumps from tick
    to tick: on the twin's Azure trace at 45 req/s, between 15 and 30 ms on five replicas, and
    one high tick a minute held a fifth replica the whole run."""
    steady = [d.status.demand.itl for d in run([itl_tick(16)] * 3, ITL_SPEC, status(5))]
    spiked = run([itl_tick(16), itl_tick(16), itl_tick(30)], ITL_SPEC, status(5))
    assert spiked[-1].status.demand.itl == pytest.approx(steady[-1])
    assert math.ceil(steady[-1]) == 4  # 30 ms read alone would ask for 5
    assert math.ceil(run([itl_tick(30)], ITL_SPEC, status(5))[0].status.demand.itl) == 5


def test_a_lasting_itl_rise_moves_the_demand_on_its_second_tick() -> None:
    ticks = [itl_tick(16), itl_tick(16), itl_tick(30), itl_tick(30)]
    itl = [d.status.demand.itl for d in run(ticks, ITL_SPEC, status(5))]
    alone = run([itl_tick(30)], ITL_SPEC, status(5))[0].status.demand.itl
    assert itl[2] == pytest.approx(itl[1])
    assert itl[3] == pytest.approx(alone)


def test_a_tick_without_an_itl_estimate_forgets_the_earlier_ones() -> None:
    """Between bursts no replica runs a batch worth reading; the next burst's first estimate
    is read as it is, not beside the last burst's."""
    ticks = [itl_tick(30), itl_tick(30), observed(5, kv=0.1, running=1), itl_tick(16)]
    last = run(ticks, ITL_SPEC, status(5))[-1].status
    assert last.itl_estimates == pytest.approx((0.016,))


def test_a_replicas_rate_is_learned_from_this_ticks_itl_not_the_median() -> None:
    """The median lags the end of a swamp by a tick; beside it, the arrival rate would be
    read as a fraction of what a replica serves."""
    calm = observed(5, kv=0.1, running=20, gen_throughput=5 * 20 / 0.016, arrival_rate=30.0)
    fresh = decide(calm, ITL_SPEC, status(5), T0).status.learned
    after_a_swamp = status(5, itl_estimates=(0.2, 0.2))
    assert decide(calm, ITL_SPEC, after_a_swamp, T0).status.learned == fresh
    assert fresh.replica_rps is not None


def test_steady_rate_predicts_nothing() -> None:
    rates = tuple(Sample(at=T0 - timedelta(seconds=a), value=10.0) for a in range(300, 0, -10))
    decision = decide(observed(5, arrival_rate=10.0), spec(), status(5, rates=rates), T0)
    assert decision.status.demand.predicted == 0.0


def test_forecast_is_bounded() -> None:
    steep = [Sample(at=T0 + timedelta(seconds=s), value=float(s * 100)) for s in range(5)]
    assert forecast(steep, T0 + timedelta(hours=1)) == 800.0
    falling = [Sample(at=T0 + timedelta(seconds=s), value=float(10 - s * 5)) for s in range(3)]
    assert forecast(falling, T0 + timedelta(hours=1)) == 5.0  # the level: no trend down


def test_a_step_the_rate_took_is_not_read_as_a_rise_that_goes_on() -> None:
    # 100 req/s, then 300 from a minute in: the line through the whole history rises, the
    # rate after the step does not. (A first tick's rate of 0 before a flat 295 req/s read
    # as a 7% rise for 300 s and bought three replicas at 300 req/s.)
    step = [
        Sample(at=T0 + timedelta(seconds=s), value=100.0 if s < 60 else 300.0)
        for s in range(0, 300, 10)
    ]
    assert forecast(step, T0 + timedelta(seconds=350)) == 300.0
    ramp = [Sample(at=T0 + timedelta(seconds=s), value=100.0 + s) for s in range(0, 300, 10)]
    assert forecast(ramp, T0 + timedelta(seconds=350)) == pytest.approx(100.0 + 350 - 10, rel=0.01)


def test_new_revision_starts_a_fresh_status_but_keeps_what_was_learned() -> None:
    old = status(6, learned=Learned(replica_rps=3.0), recommendations=(Sample(at=T0, value=6),))
    seen = observed(2, kv=0.7, running=20, revision="llama-00002")
    decision = decide(seen, spec(), old, T0)
    assert decision.status.revision == "llama-00002"
    assert decision.status.learned.replica_rps == pytest.approx(3.0, rel=0.5)
    assert decision.desired == 2


def test_paused_holds() -> None:
    decision = decide(observed(3, kv=1.0, queued=100), spec(paused=True), status(3), T0)
    assert (decision.verb, decision.desired) == (Verb.HOLD, 3)


def test_due() -> None:
    policy = spec(intervalSeconds=30)
    assert due(policy, None, T0)
    assert not due(policy, status(1, last_tick_at=T0 - timedelta(seconds=10)), T0)
    assert due(policy, status(1, last_tick_at=T0 - timedelta(seconds=30)), T0)


@pytest.mark.parametrize(
    ("reference", "load", "expected"),
    [(4, 4.3, 4), (4, 3.7, 4), (4, 4.5, 5), (4, 3.5, 4), (4, 3.0, 3), (0, 0.0, 0), (0, 0.2, 1)],
)
def test_recommend_tolerance(reference: int, load: float, expected: int) -> None:
    assert recommend(load, reference, 0.1) == expected


# ---- victims -------------------------------------------------------------------------------


def test_victims_hold_the_least_reusable_cache() -> None:
    pods = (
        ReplicaMetrics("hot", 5, 0, 0.5, cached_tokens_rate=9000.0),
        ReplicaMetrics("cold", 9, 0, 0.5, cached_tokens_rate=10.0),
        ReplicaMetrics("warm", 1, 0, 0.5, cached_tokens_rate=3000.0),
    )
    seen = Observed(ready=3, replicas=pods)
    assert choose_victims(seen, 1, cache_aware=True) == ("cold", "warm")
    assert choose_victims(seen, 2, cache_aware=True) == ("cold",)
    assert choose_victims(seen, 2, cache_aware=False) == ("warm",)  # fewest running: drains first


def test_starting_replicas_go_before_any_ready_one() -> None:
    seen = Observed(ready=3, replicas=replicas(3), starting=2)
    assert choose_victims(seen, 3, cache_aware=True) == ()
    assert choose_victims(seen, 2, cache_aware=True) == ("pod-0",)


def test_hit_rate_ranks_when_the_token_rate_is_unknown() -> None:
    pods = (
        ReplicaMetrics("a", 1, 0, 0.5, hit_rate=0.8),
        ReplicaMetrics("b", 1, 0, 0.5, hit_rate=0.1),
    )
    assert choose_victims(Observed(ready=2, replicas=pods), 1, cache_aware=True) == ("b",)


def test_scale_down_names_victims() -> None:
    pods = (
        ReplicaMetrics("a", 2, 0, 0.05, cached_tokens_rate=500.0),
        ReplicaMetrics("b", 2, 0, 0.05, cached_tokens_rate=5.0),
    )
    seen = Observed(ready=2, replicas=pods, revision="llama-00001")
    decision = decide(seen, spec(scaleDown={"stabilizationSeconds": 0}), status(2), T0)
    assert (decision.desired, decision.victims) == (1, ("b",))


# ---- invariants ----------------------------------------------------------------------------

gauge = st.one_of(st.none(), st.just(NAN), st.just(math.inf), st.floats(0, 500, allow_nan=False))
fraction = st.one_of(st.none(), st.just(NAN), st.floats(0, 1.2, allow_nan=False))
replica_metrics = st.builds(
    ReplicaMetrics,
    name=st.text("abcdef", min_size=1, max_size=4),
    running=gauge,
    queued=gauge,
    kv_usage=fraction,
    cached_tokens_rate=gauge,
)


@st.composite
def observations(draw: st.DrawFn) -> Observed:
    pods = tuple(draw(st.lists(replica_metrics, max_size=6)))
    return Observed(
        ready=draw(st.integers(0, 8)),
        replicas=pods,
        starting=draw(st.integers(0, 4)),
        arrival_rate=draw(st.one_of(st.none(), st.just(NAN), st.floats(0, 200))),
        waiting=draw(st.one_of(st.none(), st.floats(0, 100))),
        ttft_p95=draw(st.one_of(st.none(), st.floats(0, 30))),
        itl_p95=draw(st.one_of(st.none(), st.floats(0, 1))),
        revision=draw(st.sampled_from(["r1", "r2"])),
        ceiling=draw(st.one_of(st.none(), st.integers(0, 12))),
        metrics_error=draw(st.one_of(st.none(), st.just("Prometheus failed"))),
    )


@st.composite
def specs(draw: st.DrawFn) -> AutoscalePolicySpec:
    low = draw(st.integers(0, 6))
    windows = [
        {"start": f"{h:02d}:00", "end": f"{(h + d) % 24:02d}:00", "minReplicas": n}
        for h, d, n in draw(
            st.lists(
                st.tuples(st.integers(0, 23), st.integers(1, 12), st.integers(0, 20)), max_size=2
            )
        )
    ]
    return spec(
        minReplicas=low,
        maxReplicas=draw(st.integers(max(low, 1), 12)),
        idleSeconds=draw(st.sampled_from([10, 300, 600])),
        paused=draw(st.booleans()),
        warmPool={"schedule": windows},
        scaleDown={"stabilizationSeconds": draw(st.sampled_from([0, 60, 300]))},
    )


@st.composite
def statuses(draw: st.DrawFn) -> AutoscaleStatus | None:
    if draw(st.booleans()):
        return None
    ago = timedelta(seconds=draw(st.integers(0, 7200)))
    recs = tuple(
        Sample(at=T0 - timedelta(seconds=10 * k), value=float(v))
        for k, v in enumerate(draw(st.lists(st.integers(0, 20), max_size=10)), start=1)
    )
    return AutoscaleStatus(
        inference_service="llama",
        revision=draw(st.sampled_from(["r1", "r2"])),
        desired=draw(st.integers(0, 20)),
        recommendations=recs,
        last_active_at=T0 - ago,
        cold=ColdStarts(requests=draw(st.floats(0, 1000)), waited=draw(st.floats(0, 10))),
    )


def _spec_bounds(seen: Observed, policy: AutoscalePolicySpec) -> tuple[int, int]:
    ceiling = policy.max_replicas
    if seen.ceiling:
        ceiling = min(ceiling, seen.ceiling)
    floor = max(policy.min_replicas, policy.warm_pool.floor(T0))
    return min(floor, ceiling), ceiling


@settings(max_examples=100, deadline=None)
@given(observations(), specs(), statuses())
def test_never_below_the_floor_nor_above_the_ceiling(
    seen: Observed, policy: AutoscalePolicySpec, before: AutoscaleStatus | None
) -> None:
    floor, ceiling = _spec_bounds(seen, policy)
    decision = decide(seen, policy, before, T0)
    assert floor <= decision.desired <= ceiling
    assert decision.status.desired == decision.desired


def test_a_pod_reporting_a_batch_while_none_is_ready_prices_the_queue() -> None:
    """Hypothesis found it: Knative counts no pod ready (one just turned unready) while its
    metrics still show a running and a queued request; pricing the queue divided by zero."""
    seen = Observed(
        ready=0,
        replicas=(ReplicaMetrics(name="a", running=1.0, queued=1.0, kv_usage=0.0),),
        revision="r1",
    )
    policy = AutoscalePolicySpec(inferenceService="llama", minReplicas=0, maxReplicas=1)
    assert decide(seen, policy, None, T0).desired == 1


@settings(max_examples=100, deadline=None)
@given(observations(), specs(), statuses())
def test_never_to_zero_while_requests_are_queued(
    seen: Observed, policy: AutoscalePolicySpec, before: AutoscaleStatus | None
) -> None:
    decision = decide(seen, policy, before, T0)
    if seen.busy():
        assert decision.desired >= 1


@settings(max_examples=100, deadline=None)
@given(observations(), specs(), statuses(), st.integers(0, 5))
def test_missing_metrics_hold_the_count(
    seen: Observed, policy: AutoscalePolicySpec, before: AutoscaleStatus | None, broken: int
) -> None:
    pods = (*seen.replicas, ReplicaMetrics(f"nan-{broken}", 1.0, NAN, 0.5))
    broken_seen = Observed(
        ready=max(seen.ready, len(pods)),
        replicas=pods,
        starting=seen.starting,
        revision=seen.revision,
    )
    decision = decide(broken_seen, policy, before, T0)
    assert decision.verb in (Verb.HALT, Verb.HOLD)  # HOLD: paused
    floor, ceiling = _spec_bounds(broken_seen, policy)
    same = before is not None and before.revision == broken_seen.revision
    reference = max(before.desired if same and before else 0, broken_seen.current)
    assert decision.desired == min(max(reference, floor, 1 if broken_seen.busy() else 0), ceiling)
    assert decision.victims == ()


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 10),
    st.lists(st.floats(-1.0, 1.0), min_size=5, max_size=60),
    st.floats(0.02, 0.5),
)
def test_noise_within_the_tolerance_moves_nothing(
    count: int, noise: list[float], tolerance: float
) -> None:
    policy = spec(
        maxReplicas=20,
        targets={"tolerance": tolerance},
        warmPool={"predictive": {"enabled": False}},
    )
    target = policy.targets.kv_usage
    # each tick, the fleet's KV usage is off its target by at most the tolerance
    ticks = [observed(count, kv=target * (1 + 0.999 * tolerance * e), running=20) for e in noise]
    assert {d.desired for d in run(ticks, policy, status(count))} == {count}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=10, max_size=80), st.sampled_from([60, 300]))
def test_no_scale_down_within_the_window_of_a_scale_up(usage: list[float], window: int) -> None:
    policy = spec(scaleDown={"stabilizationSeconds": window}, maxReplicas=40)
    desired, count, ticks = [], 4, []
    current: AutoscaleStatus | None = status(4)
    for i, kv in enumerate(usage):
        seen = observed(count, kv=kv, running=10 * kv + 1, arrival_rate=1.0)
        decision = decide(seen, policy, current, T0 + timedelta(seconds=10 * i))
        current, count = decision.status, decision.desired
        desired.append(decision.desired)
        ticks.append(decision.verb)
    last_up = None
    for i, verb in enumerate(ticks):
        if verb is Verb.SCALE_UP:
            last_up = i
        if verb is Verb.SCALE_DOWN and last_up is not None:
            assert (i - last_up) * 10 >= window, desired
