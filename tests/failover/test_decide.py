"""The failover decision: judging intervals, hysteresis, pre-scaling, failback, the guard.

Parametrised cases for each rule, then Hypothesis for the invariants under noisy signals:
weights never all zero, no weight to an unhealthy region while another is healthy, and no
region given traffic back sooner than the hold time after it lost it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.controllers.failover.decide import (
    Decision,
    RaiseFloor,
    ReleaseFloor,
    SetWeights,
    decide,
    interval_due,
    judge,
)
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.failover.state import (
    FailoverStatus,
    HealthCheck,
    Observed,
    Phase,
    RegionSignals,
    Verdict,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MODEL = "llama"
REGIONS = ("us", "eu", "ap")


def make_spec(**overrides: Any) -> FailoverPolicySpec:
    body: dict[str, Any] = {
        "hostedZoneId": "Z1",
        "recordName": "llama.example.com",
        "models": [MODEL],
        "regions": [{"name": n} for n in REGIONS],
        "intervalSeconds": 10,
        "unhealthyAfter": 2,
        "healthyAfter": 3,
        "minHoldSeconds": 60,
        "failback": {"stepPercent": 50, "stepSeconds": 10},
    }
    return FailoverPolicySpec.model_validate(body | overrides)


def good(ready: int = 2) -> RegionSignals:
    return RegionSignals(
        availability=1.0, error_rate=0.0, ttft_bad_ratio=0.0, requests=100.0,
        ready_replicas={MODEL: ready}, health_check=HealthCheck.HEALTHY,
    )  # fmt: skip


def down(ready: int = 0) -> RegionSignals:
    return replace(good(ready), availability=0.0, health_check=HealthCheck.UNHEALTHY)


def slow(ready: int = 2) -> RegionSignals:
    return replace(good(ready), ttft_bad_ratio=0.9)


BLIND_HEALTHY = RegionSignals(reachable=False, health_check=HealthCheck.HEALTHY)
BLIND_UNHEALTHY = RegionSignals(reachable=False, health_check=HealthCheck.UNHEALTHY)


class Run:
    """Drives `decide` interval by interval, with records that take the weights it sets."""

    def __init__(self, spec: FailoverPolicySpec | None = None) -> None:
        self.spec = spec or make_spec()
        self.status: FailoverStatus | None = None
        self.records: dict[str, int] = {r.name: r.weight for r in self.spec.regions}
        self.now = T0
        self.decisions: list[Decision] = []

    def tick(self, signals: Mapping[str, RegionSignals], *, seconds: int = 10) -> Decision:
        observed = Observed(signals=signals, weights=dict(self.records))
        decision = decide(observed, self.spec, self.status, self.now)
        self.status = decision.status
        if decision.weights is not None:
            self.records = dict(decision.weights)
        self.decisions.append(decision)
        self.now += timedelta(seconds=seconds)
        return decision

    def ticks(self, n: int, signals: Mapping[str, RegionSignals]) -> Decision:
        for _ in range(n):
            last = self.tick(signals)
        return last

    def phase(self, region: str) -> Phase:
        assert self.status is not None
        return self.status.region(region).phase


def everywhere(signals: RegionSignals, **others: RegionSignals) -> dict[str, RegionSignals]:
    return {name: others.get(name, signals) for name in REGIONS}


# ---- judging one interval --------------------------------------------------------------------

JUDGED = {
    "all-good": (good(), Verdict.GOOD, False),
    "replicas-down": (replace(good(), availability=0.2), Verdict.BAD, True),
    "errors": (replace(good(), error_rate=0.5), Verdict.BAD, True),
    "errors-on-too-few-requests": (
        replace(good(), error_rate=0.5, requests=3), Verdict.GOOD, False),
    "slow-only": (slow(), Verdict.BAD, False),
    "slow-and-failing": (replace(slow(), error_rate=0.9), Verdict.BAD, True),
    "nan-error-rate": (replace(good(), error_rate=float("nan")), Verdict.GOOD, False),
    "health-check-unhealthy": (
        replace(good(), health_check=HealthCheck.UNHEALTHY), Verdict.BAD, True),
    "no-serving-signal": (RegionSignals(), Verdict.UNKNOWN, False),
    "no-serving-signal-check-healthy": (
        RegionSignals(health_check=HealthCheck.HEALTHY), Verdict.GOOD, False),
    "blind-check-healthy": (BLIND_HEALTHY, Verdict.UNKNOWN, False),
    "blind-check-unknown": (RegionSignals(reachable=False), Verdict.UNKNOWN, False),
    "blind-check-unhealthy": (BLIND_UNHEALTHY, Verdict.BAD, True),
    "blind-peers-see-down": (
        RegionSignals(reachable=False, peers_down=2, peers_up=0), Verdict.BAD, True),
    "peers-cannot-reach-it": (replace(good(), peers_down=2), Verdict.BAD, True),
    "one-peer-of-two-cannot": (replace(good(), peers_down=1, peers_up=1), Verdict.GOOD, False),
    "blind-peers-split": (
        RegionSignals(reachable=False, peers_down=1, peers_up=1), Verdict.UNKNOWN, False),
}  # fmt: skip


@pytest.mark.parametrize(("signals", "verdict", "urgent"), JUDGED.values(), ids=JUDGED.keys())
def test_judge(signals: RegionSignals, verdict: Verdict, urgent: bool) -> None:
    judgement = judge(signals, make_spec())
    assert (judgement.verdict, judgement.urgent) == (verdict, urgent), judgement.text


UNREACHABLE = {"blind-check-unhealthy", "blind-peers-see-down"}


@pytest.mark.parametrize("case", JUDGED, ids=JUDGED)
def test_only_a_region_no_one_outside_reaches_is_judged_unreachable(case: str) -> None:
    signals, _, _ = JUDGED[case]
    assert judge(signals, make_spec()).unreachable is (case in UNREACHABLE)


@pytest.mark.parametrize("unreachable_after", [1, 2, 3])
def test_an_unreachable_region_goes_out_after_its_own_short_streak(unreachable_after: int) -> None:
    run = Run(make_spec(unhealthyAfter=4, unreachableAfter=unreachable_after))
    run.tick(everywhere(good()))
    gone = RegionSignals(reachable=False, peers_down=2, peers_up=0)
    for _ in range(unreachable_after - 1):
        assert run.tick(everywhere(good(), us=gone)).weights is None
    assert run.tick(everywhere(good(), us=gone)).weights == {"us": 0, "eu": 100, "ap": 100}


def test_a_reachable_region_breaking_a_threshold_still_needs_its_whole_streak() -> None:
    run = Run(make_spec(unhealthyAfter=4, unreachableAfter=1))
    run.tick(everywhere(good()))
    failing = replace(good(), error_rate=0.5)
    for _ in range(3):
        assert run.tick(everywhere(good(), us=failing)).weights is None
    assert run.tick(everywhere(good(), us=failing)).weights == {"us": 0, "eu": 100, "ap": 100}


def test_health_checks_can_be_left_out_while_prometheus_answers() -> None:
    spec = make_spec(signals={"useHealthChecks": False})
    assert judge(replace(good(), health_check=HealthCheck.UNHEALTHY), spec).verdict is Verdict.GOOD
    # ...but a blind region is still judged by them: they are all there is.
    assert judge(BLIND_UNHEALTHY, spec).verdict is Verdict.BAD


# ---- hysteresis and the shift ----------------------------------------------------------------


@pytest.mark.parametrize("unhealthy_after", [1, 2, 4])
def test_a_dead_region_goes_out_after_exactly_n_bad_intervals(unhealthy_after: int) -> None:
    run = Run(make_spec(unhealthyAfter=unhealthy_after))
    run.tick(everywhere(good()))
    for _ in range(unhealthy_after - 1):
        assert run.tick(everywhere(good(), us=down())).weights is None
    decision = run.tick(everywhere(good(), us=down()))
    assert decision.weights == {"us": 0, "eu": 100, "ap": 100}
    assert run.phase("us") is Phase.UNHEALTHY
    assert any(n.reason == "RegionUnhealthy" and n.warning for n in decision.notes)


def test_unknown_intervals_neither_count_nor_reset() -> None:
    run = Run()
    run.tick(everywhere(good(), us=down()))
    run.tick(everywhere(good(), us=BLIND_HEALTHY))
    assert run.phase("us") is Phase.HEALTHY
    assert run.tick(everywhere(good(), us=down())).weights == {"us": 0, "eu": 100, "ap": 100}


def test_a_good_interval_resets_the_bad_streak() -> None:
    run = Run()
    for signals in (down(), good(), down(), good()):
        assert run.tick(everywhere(good(), us=signals)).weights is None
    assert run.phase("us") is Phase.HEALTHY


def test_floors_are_raised_before_the_weights_move() -> None:
    run = Run()
    run.tick(everywhere(good(ready=2)))  # steady fleet: 6 replicas
    run.tick(everywhere(good(), us=down()))
    decision = run.tick(everywhere(good(), us=down()))
    # eu and ap each take half: ceil(6 x 1/2 x 1.2) = 4.
    assert decision.actions == (
        RaiseFloor("eu", MODEL, 4),
        RaiseFloor("ap", MODEL, 4),
        SetWeights({"us": 0, "eu": 100, "ap": 100}),
    )


def test_a_slow_region_keeps_its_traffic_until_the_survivors_are_warm() -> None:
    run = Run()
    run.tick(everywhere(good(ready=2)))
    run.tick(everywhere(good(), us=slow()))
    decision = run.tick(everywhere(good(), us=slow()))
    assert run.phase("us") is Phase.EVACUATING
    assert [type(a) for a in decision.actions] == [RaiseFloor, RaiseFloor]
    assert run.tick(everywhere(good(ready=3), us=slow())).weights is None  # floors are 4
    decision = run.tick(everywhere(good(ready=4), us=slow()))
    assert decision.weights == {"us": 0, "eu": 100, "ap": 100}
    assert "survivors are warm" in decision.reason


def test_a_slow_region_moves_after_the_wait_even_if_survivors_stay_cold() -> None:
    run = Run(make_spec(prescale={"maxWaitSeconds": 30}))
    run.tick(everywhere(good(ready=2)))
    run.ticks(2, everywhere(good(ready=2), us=slow()))
    run.ticks(2, everywhere(good(ready=2), us=slow()))
    assert run.phase("us") is Phase.EVACUATING
    assert run.tick(everywhere(good(ready=2), us=slow())).weights == {"us": 0, "eu": 100, "ap": 100}


def test_a_slow_region_that_starts_failing_moves_at_once() -> None:
    run = Run()
    run.tick(everywhere(good()))
    run.ticks(2, everywhere(good(), us=slow()))
    assert run.tick(everywhere(good(), us=down())).weights == {"us": 0, "eu": 100, "ap": 100}


def test_without_prescaling_a_slow_region_moves_at_once() -> None:
    run = Run(make_spec(prescale={"enabled": False}))
    run.tick(everywhere(good()))
    run.tick(everywhere(good(), us=slow()))
    decision = run.tick(everywhere(good(), us=slow()))
    assert decision.actions == (SetWeights({"us": 0, "eu": 100, "ap": 100}),)


# ---- failback --------------------------------------------------------------------------------


def _out(run: Run) -> None:
    run.tick(everywhere(good(ready=2)))
    run.ticks(2, everywhere(good(ready=2), us=down()))
    assert run.phase("us") is Phase.UNHEALTHY


def test_failback_waits_for_the_hold_time_then_steps_back() -> None:
    run = Run()
    _out(run)
    t_out = run.now - timedelta(seconds=10)
    weights = []
    for _ in range(14):
        decision = run.tick(everywhere(good(ready=4), us=good(ready=3)))  # its floor is 3
        weights.append((run.now - timedelta(seconds=10) - t_out, run.records["us"]))
    back = [(d, w) for d, w in weights if w > 0]
    assert back[0][0] >= timedelta(seconds=60)
    assert [w for _, w in back][:3] == [50, 100, 100]
    assert run.phase("us") is Phase.HEALTHY
    # Once the fleet is whole, the raised floors go back.
    released = [a for d in run.decisions for a in d.actions if isinstance(a, ReleaseFloor)]
    assert {(a.region, a.model) for a in released} == {("eu", MODEL), ("ap", MODEL), ("us", MODEL)}
    assert decision.status.region("eu").raised_floors == {}


def test_failback_needs_warm_replicas_in_the_recovering_region() -> None:
    run = Run()
    _out(run)
    run.ticks(6, everywhere(good(ready=4), us=good(ready=0)))  # healthy, but scaled to zero
    assert run.phase("us") is Phase.RECOVERING
    assert run.records["us"] == 0
    assert "warm" in (run.status.region("us").reason if run.status else "")
    run.tick(everywhere(good(ready=4), us=good(ready=1)))  # floor 3 (ceil(6/3 x 1.2)): 2 needed
    assert run.records["us"] == 0
    run.tick(everywhere(good(ready=4), us=good(ready=2)))
    assert run.records["us"] == 50


def test_a_relapse_during_failback_takes_the_region_out_again_and_restarts_the_hold() -> None:
    run = Run()
    _out(run)
    run.ticks(7, everywhere(good(ready=4), us=good(ready=2)))
    assert run.records["us"] == 50
    run.ticks(2, everywhere(good(ready=4), us=down()))
    assert run.records["us"] == 0
    run.ticks(5, everywhere(good(ready=4), us=good(ready=2)))
    assert run.records["us"] == 0  # 50 s since it went out again: the hold is 60 s


def test_a_region_the_guard_kept_serving_keeps_its_traffic_when_failback_starts() -> None:
    # Hypothesis's counterexample: every region out for one interval, so the guard keeps the
    # weights in place; after the hold all start failing back, one without warm replicas yet.
    # Stepping up from 0% took its traffic away, and the next step gave it back 10 s later.
    run = Run(make_spec(unhealthyAfter=1, healthyAfter=1, minHoldSeconds=30))
    run.tick(everywhere(good(ready=2)))
    run.tick(everywhere(down()))
    assert run.records == {"us": 100, "eu": 100, "ap": 100}
    run.ticks(2, everywhere(good(ready=2)))
    run.tick(everywhere(good(ready=2), ap=good(ready=0)))  # 30 s: the hold is over
    assert run.phase("ap") is Phase.RECOVERING
    assert run.records["ap"] > 0
    run.tick(everywhere(good(ready=2)))
    assert run.records == {"us": 100, "eu": 100, "ap": 100}


# ---- never every region out, blind regions ---------------------------------------------------


def test_the_last_region_standing_is_never_taken_out() -> None:
    run = Run()
    run.tick(everywhere(good()))
    run.ticks(2, everywhere(good(), us=down(), eu=down()))
    assert run.records == {"us": 0, "eu": 0, "ap": 100}
    decision = run.ticks(3, everywhere(down()))
    assert run.records == {"us": 0, "eu": 0, "ap": 100}
    assert "no region is healthy" in decision.reason
    assert any(n.reason == "FailoverGuard" for n in decision.notes)


def test_every_prometheus_unreachable_moves_nothing() -> None:
    run = Run()
    run.tick(everywhere(good()))
    for _ in range(10):
        assert run.tick(everywhere(RegionSignals(reachable=False))).weights is None
    assert {r.phase for r in run.status.regions} == {Phase.HEALTHY} if run.status else False


def test_a_blind_region_goes_out_only_on_an_outside_view() -> None:
    run = Run()
    run.tick(everywhere(good()))
    run.ticks(5, everywhere(good(), us=BLIND_HEALTHY))
    assert run.records["us"] == 100
    run.ticks(2, everywhere(good(), us=BLIND_UNHEALTHY))
    assert run.records["us"] == 0


def test_a_blind_region_does_not_come_back_on_its_health_check_alone() -> None:
    run = Run()
    _out(run)
    run.ticks(20, everywhere(good(), us=BLIND_HEALTHY))
    assert run.phase("us") is Phase.UNHEALTHY


def test_healthy_standby_regions_take_over_when_every_weighted_region_is_out() -> None:
    regions = [{"name": "us"}, {"name": "eu"}, {"name": "ap", "weight": 0}]
    run = Run(make_spec(regions=regions))
    run.tick(everywhere(good()))
    assert run.records == {"us": 100, "eu": 100, "ap": 0}
    run.ticks(2, everywhere(down(), ap=good()))
    assert run.records == {"us": 0, "eu": 0, "ap": 1}


def test_records_moved_by_hand_are_put_back() -> None:
    run = Run()
    run.tick(everywhere(good()))
    run.records["eu"] = 7
    assert run.tick(everywhere(good())).weights == {"us": 100, "eu": 100, "ap": 100}


def test_paused_judges_but_acts_on_nothing() -> None:
    run = Run(make_spec(paused=True))
    decision = run.ticks(5, everywhere(good(), us=down()))
    assert decision.actions == ()
    assert run.status is not None and run.status.region("us").verdict is Verdict.BAD
    assert run.phase("us") is Phase.HEALTHY


def test_a_region_added_to_the_spec_starts_healthy() -> None:
    run = Run(make_spec(regions=[{"name": "us"}, {"name": "eu"}]))
    run.tick({"us": good(), "eu": good()})
    run.spec = make_spec()
    assert run.tick(everywhere(good())).weights == {"us": 100, "eu": 100, "ap": 100}


@pytest.mark.parametrize(("after", "due"), [(0, False), (8, False), (9, True), (30, True)])
def test_interval_due(after: int, due: bool) -> None:
    status = FailoverStatus(observed_at=T0)
    assert interval_due(make_spec(), status, T0 + timedelta(seconds=after)) is due
    assert interval_due(make_spec(), None, T0)


# ---- invariants under noisy signals ----------------------------------------------------------

SIGNALS = st.sampled_from(
    [good(2), good(0), down(), slow(), BLIND_HEALTHY, BLIND_UNHEALTHY, RegionSignals(),
     RegionSignals(reachable=False, peers_down=2), replace(good(3), error_rate=0.4)]
)  # fmt: skip


def _random_spec(
    n: int, weights: list[int], bad: int, ok: int, hold: int, step: int, pre: bool
) -> FailoverPolicySpec:
    return make_spec(
        regions=[{"name": REGIONS[i], "weight": w} for i, w in enumerate(weights[:n])],
        unhealthyAfter=bad, healthyAfter=ok, minHoldSeconds=hold,
        failback={"stepPercent": step, "stepSeconds": 10}, prescale={"enabled": pre},
    )  # fmt: skip


SPECS = st.builds(
    _random_spec,
    n=st.integers(2, 3),
    weights=st.lists(st.integers(1, 255), min_size=3, max_size=3),
    bad=st.integers(1, 3),
    ok=st.integers(1, 4),
    hold=st.sampled_from([0, 30, 60, 120]),
    step=st.sampled_from([10, 25, 50, 100]),
    pre=st.booleans(),
)


def _drive(spec: FailoverPolicySpec, intervals: Sequence[Sequence[RegionSignals]]) -> Run:
    run = Run(spec)
    for row in intervals:
        run.tick(dict(zip(spec.region_names, row, strict=False)))
    return run


INTERVALS = st.lists(st.lists(SIGNALS, min_size=3, max_size=3), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(spec=SPECS, intervals=INTERVALS)
def test_weights_never_all_zero_and_none_to_unhealthy_regions(
    spec: FailoverPolicySpec, intervals: list[list[RegionSignals]]
) -> None:
    run = _drive(spec, intervals)
    for decision in run.decisions:
        weights, regions = decision.status.weights, decision.status.regions
        assert set(weights) == set(spec.region_names)
        assert all(0 <= w <= 255 for w in weights.values())
        assert sum(weights.values()) > 0
        if any(r.phase is Phase.HEALTHY for r in regions):
            assert all(weights[r.name] == 0 for r in regions if r.phase is Phase.UNHEALTHY)


@settings(max_examples=150, deadline=None)
@given(spec=SPECS, intervals=INTERVALS)
def test_no_region_gets_traffic_back_sooner_than_the_hold_time(
    spec: FailoverPolicySpec, intervals: list[list[RegionSignals]]
) -> None:
    run = _drive(spec, intervals)
    hold = timedelta(seconds=spec.min_hold_seconds)
    for name in spec.region_names:
        left_at: datetime | None = None
        before = spec.region(name).weight
        for decision in run.decisions:
            at, weight = decision.status.observed_at, decision.status.weights[name]
            assert at is not None
            if before > 0 and weight == 0:
                left_at = at
            if before == 0 and weight > 0 and left_at is not None:
                assert at - left_at >= hold, (name, at - left_at)
            before = weight


@settings(max_examples=100, deadline=None)
@given(spec=SPECS, intervals=INTERVALS)
def test_floors_come_before_weights_and_releases_after(
    spec: FailoverPolicySpec, intervals: list[list[RegionSignals]]
) -> None:
    order = {RaiseFloor: 0, SetWeights: 1, ReleaseFloor: 2}
    for decision in _drive(spec, intervals).decisions:
        kinds = [order[type(a)] for a in decision.actions]
        assert kinds == sorted(kinds)
        assert all(a.replicas > 0 for a in decision.actions if isinstance(a, RaiseFloor))


@settings(max_examples=100, deadline=None)
@given(spec=SPECS, prefix=INTERVALS)
def test_a_dead_region_is_out_within_n_intervals_while_another_is_healthy(
    spec: FailoverPolicySpec, prefix: list[list[RegionSignals]]
) -> None:
    run = _drive(spec, prefix)
    healthy_rest = {n: good() for n in spec.region_names[1:]}
    # Let the others become healthy first (their failback included), then kill the first.
    run.ticks(40, {spec.region_names[0]: good(), **healthy_rest})
    run.ticks(spec.unhealthy_after, {spec.region_names[0]: down(), **healthy_rest})
    assert run.records[spec.region_names[0]] == 0
