"""The LoRA controller's decision: rules by example, then its invariants under Hypothesis."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from radixfleet.controllers.lora.decide import decide, place
from radixfleet.controllers.lora.observed import (
    Action,
    Decision,
    Demand,
    Observed,
    Replica,
    may_hold,
)
from radixfleet.controllers.lora.spec import AdapterPolicy

POLICY = AdapterPolicy(rps_per_copy=2.0, keep_band=0.5, min_hold_s=60, idle_unload_s=300)
NOW = 10_000.0
OLD = NOW - 1_000  # loaded long ago: past min_hold_s
OWNERS: dict[str, str | None] = {"s-tone": "support", "s-faq": "support", "q-rank": "search",
                                 "shared": None}  # fmt: skip


def replica(name: str, *held: str, tenant: str = "support", bound: int = 2,
            running: dict[str, int] | None = None, at: float = OLD) -> Replica:  # fmt: skip
    return Replica(name, tenant, bound, {a: at for a in held}, running or {})


def observe(replicas: Iterable[Replica], *demand: Demand) -> Observed:
    return Observed(tuple(replicas), tuple(demand), OWNERS)


def loads(decision: Decision) -> set[tuple[str, str]]:
    return {(a.replica, a.adapter) for a in decision.actions if a.verb == "load"}


def unloads(decision: Decision) -> set[tuple[str, str]]:
    return {(a.replica, a.adapter) for a in decision.actions if a.verb == "unload"}


def test_missing_metrics_halt_and_touch_nothing() -> None:
    observed = Observed((replica("r0", "s-tone"),), None, OWNERS)
    decision = decide(observed, POLICY, NOW)
    assert decision.actions == () and decision.halted


def test_a_popular_adapter_gets_copies_by_its_rate() -> None:
    fleet = [replica(f"r{i}") for i in range(4)]
    decision = decide(observe(fleet, Demand("support", "s-tone", rps=5.0, last_request_at=NOW)),
                      POLICY, NOW)  # fmt: skip
    assert len(loads(decision)) == 3  # ceil(5 / 2)


def test_the_copies_of_a_cooling_adapter_stay_inside_the_band() -> None:
    fleet = [replica("r0", "s-tone"), replica("r1", "s-tone"), replica("r2", "s-tone")]
    # 4.5 rps wants 3 copies to grow into, and keeps 3 (4.5 * 1.5 / 2 = 3.4): no flapping.
    hot = observe(fleet, Demand("support", "s-tone", rps=4.5, last_request_at=NOW))
    assert decide(hot, POLICY, NOW).actions == ()
    cool = observe(fleet, Demand("support", "s-tone", rps=2.0, last_request_at=NOW))
    assert len(unloads(decide(cool, POLICY, NOW))) == 1  # 2 rps * 1.5 / 2 -> 2 copies kept


def test_a_cold_adapter_is_unloaded_but_not_while_it_runs_or_is_recent() -> None:
    fleet = [replica("r0", "s-tone"), replica("r1", "s-faq", running={"s-faq": 1}),
             replica("r2", "shared", at=NOW - 10)]  # fmt: skip
    decision = decide(observe(fleet), POLICY, NOW)
    assert unloads(decision) == {("r0", "s-tone")}


def test_an_adapter_asked_for_recently_keeps_one_copy() -> None:
    fleet = [replica("r0", "s-tone")]
    demand = Demand("support", "s-tone", rps=0.0, last_request_at=NOW - 100)
    assert decide(observe(fleet, demand), POLICY, NOW).actions == ()


def test_a_waiting_request_takes_the_slot_of_a_recent_cold_adapter() -> None:
    fleet = [replica("r0", "s-tone", "shared", at=NOW - 1, bound=2)]
    decision = decide(observe(fleet, Demand("support", "s-faq", waiting=1)), POLICY, NOW)
    assert loads(decision) == {("r0", "s-faq")} and len(unloads(decision)) == 1
    assert decision.actions[0].verb == "unload"  # the slot is freed before it is taken


def test_another_tenants_adapter_is_unloaded_and_never_loaded() -> None:
    fleet = [replica("r0", "q-rank"), replica("r1")]
    decision = decide(observe(fleet, Demand("support", "q-rank", rps=9, waiting=3)), POLICY, NOW)
    assert unloads(decision) == {("r0", "q-rank")} and not loads(decision)


def test_new_copies_go_to_the_least_loaded_replica() -> None:
    fleet = [replica("r0", "s-tone"), replica("r1")]
    demand = [Demand("support", "s-tone", rps=1.5, last_request_at=NOW),
              Demand("support", "s-faq", rps=1.0, last_request_at=NOW)]  # fmt: skip
    assert loads(decide(observe(fleet, *demand), POLICY, NOW)) == {("r1", "s-faq")}


@pytest.mark.parametrize(
    ("tenant", "adapter", "expected"),
    [("support", "s-faq", {("r1", "s-faq")}), ("support", "s-tone", set()),
     ("search", "s-faq", set()), ("support", "unknown", set())],
    ids=["unheld-own", "already-held", "another-tenants", "not-in-catalog"],
)  # fmt: skip
def test_place_loads_one_copy_on_demand(tenant: str, adapter: str, expected: set) -> None:
    fleet = [replica("r0", "s-tone", bound=1), replica("r1", bound=1)]
    actions = place(observe(fleet), POLICY, NOW, tenant=tenant, adapter=adapter)
    assert {(a.replica, a.adapter) for a in actions if a.verb == "load"} == expected


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")], ids=str)
def test_a_policy_with_no_sensible_rate_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="rps_per_copy"):
        AdapterPolicy(rps_per_copy=bad)


# -- invariants ------------------------------------------------------------------------------

TENANTS = ("support", "search")
ADAPTERS = sorted(OWNERS)


@st.composite
def fleets(draw: st.DrawFn) -> Observed:
    replicas = []
    for i in range(draw(st.integers(1, 5))):
        bound = draw(st.integers(1, 3))
        tenant = draw(st.sampled_from(TENANTS))
        held = draw(st.lists(st.sampled_from(ADAPTERS), unique=True, max_size=bound))
        ages = {a: NOW - draw(st.sampled_from([1.0, 1_000.0])) for a in held}
        running = {a: 1 for a in held if draw(st.booleans())}
        replicas.append(Replica(f"r{i}", tenant, bound, ages, running))
    demand = [Demand(t, a, rps=draw(st.sampled_from([0.0, 0.5, 3.0, 9.0])),
                     waiting=draw(st.integers(0, 2)),
                     last_request_at=draw(st.sampled_from([None, NOW - 10, NOW - 1_000])))
              for t in TENANTS for a in ADAPTERS if draw(st.booleans())]  # fmt: skip
    return Observed(tuple(replicas), tuple(demand), OWNERS)


def apply(observed: Observed, actions: Iterable[Action], now: float) -> Observed:
    """The replicas after the actions (a load at `now`)."""
    held = {r.name: dict(r.loaded) for r in observed.replicas}
    for action in actions:
        if action.verb == "load":
            held[action.replica][action.adapter] = now
        else:
            del held[action.replica][action.adapter]
    replicas = tuple(Replica(r.name, r.tenant, r.max_loaded, held[r.name], r.running)
                     for r in observed.replicas)  # fmt: skip
    return Observed(replicas, observed.demand, observed.owners)


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_no_replica_ever_holds_more_than_its_bound(observed: Observed) -> None:
    after = apply(observed, decide(observed, POLICY, NOW).actions, NOW)
    assert all(len(r.loaded) <= r.max_loaded for r in after.replicas)


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_loads_only_the_tenants_own_or_shared_adapters(observed: Observed) -> None:
    tenant_of = {r.name: r.tenant for r in observed.replicas}
    for action in decide(observed, POLICY, NOW).actions:
        if action.verb == "load":
            assert may_hold(OWNERS, action.adapter, tenant_of[action.replica])


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_never_unloads_a_copy_with_requests_running_on_it(observed: Observed) -> None:
    by_name = {r.name: r for r in observed.replicas}
    for action in decide(observed, POLICY, NOW).actions:
        if action.verb == "unload":
            assert not by_name[action.replica].busy_with(action.adapter)


def _active(observed: Observed, tenant: str) -> set[str]:
    waiting = {d.adapter for d in observed.demand or () if d.tenant == tenant and d.waiting}
    running = {a for r in observed.replicas if r.tenant == tenant for a in r.running}
    return {a for a in waiting | running if may_hold(OWNERS, a, tenant)}


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_an_adapter_with_waiting_requests_is_held_after_the_pass(observed: Observed) -> None:
    for tenant in TENANTS:
        pool = [r for r in observed.replicas if r.tenant == tenant]
        # Room for it: each replica could hold every adapter in use at once, beside foreign ones
        # still running (which leave on a later pass).
        foreign = max((sum(not may_hold(OWNERS, a, tenant) for a in r.running) for r in pool),
                      default=0)  # fmt: skip
        assume(all(len(_active(observed, tenant)) + foreign <= r.max_loaded for r in pool))
    after = apply(observed, decide(observed, POLICY, NOW).actions, NOW)
    for demand in observed.demand or ():
        pool = [r for r in after.replicas if r.tenant == demand.tenant]
        if demand.waiting and pool and may_hold(OWNERS, demand.adapter, demand.tenant):
            assert any(demand.adapter in r.loaded for r in pool), demand


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_a_second_pass_on_the_same_demand_does_nothing(observed: Observed) -> None:
    first = decide(observed, POLICY, NOW)
    after = apply(observed, first.actions, NOW)
    assert decide(after, POLICY, NOW).actions == ()
