"""Chaos around the canary controller on the local fleet: Prometheus down, the controller killed.

The fleet and the rollout are those of tests/canary/test_localfleet.py: one region, model
"llama" on one emulated replica behind smg, a real Prometheus scraping every second, the real
`Controller` ticking every 0.5 s, and a good canary (no fault) rolled out in steps of 20, 35
and 50% with a 4 s interval under noisy traffic. Into that rollout:

- **Prometheus stops for 12 s** (three intervals; a minute at the defaults' 20 s would be the
  same three missed analyses) once the canary holds 20%. The controller must halt and say why,
  move no traffic while it is blind, and finish the rollout once Prometheus is back.
- **The controller dies between recording a step and moving traffic** (the worst moment: its
  status says 35%, the InferenceService still 20%). A new controller, with nothing but the
  recorded status, must carry on from there: re-assert 35%, then go on to promote, never step
  back nor roll back.

Clients retry a 5xx before any token once, as in the canary tests; no request may be lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from radixfleet.adapters.prometheus import HttpPrometheus
from radixfleet.controllers.canary.controller import Controller
from radixfleet.controllers.canary.decide import Decision
from radixfleet.controllers.canary.fakes import FakeCanaryPolicies, FakeEvents
from radixfleet.controllers.canary.localfleet import (
    DEFAULT_POLICY,
    LOCAL_MIN_INTERVAL_S,
    LocalFleetInferenceServices,
    LocalRollouts,
    NoisyTraffic,
)
from radixfleet.controllers.canary.metrics import CanaryMetrics
from radixfleet.controllers.canary.state import Phase, RolloutStatus, Verb, rollout_of
from radixfleet.localfleet import LocalFleet
from tests.canary.test_localfleet import MODEL, NS, POLICY, REGION, fleet

__all__ = ["fleet"]  # the canary tests' fleet and Prometheus, built the same way here
pytestmark = [pytest.mark.fleet, pytest.mark.prometheus, pytest.mark.slow]

OUTAGE_S = 12.0
MAX_S = 120.0  # a rollout not final by then fails the test


class ControllerKilledError(Exception):
    """The controller's process died here (raised in place of its next traffic move)."""


class DyingInferenceServices(LocalFleetInferenceServices):
    """The fleet's InferenceServices, through which the controller dies when it first moves
    the canary to `die_at` percent (after it recorded that step in the policy's status)."""

    def __init__(self, fleet: LocalFleet, *, die_at: int) -> None:
        super().__init__(fleet, region=REGION)
        self.die_at = die_at
        self.died = threading.Event()
        self.moves: list[int | None] = []

    def set_canary_percent(self, namespace: str, name: str, **kwargs: Any) -> None:
        if kwargs.get("percent") == self.die_at and not self.died.is_set():
            self.died.set()
            raise ControllerKilledError(f"killed before moving {name} to {self.die_at}%")
        self.moves.append(kwargs.get("percent"))
        super().set_canary_percent(namespace, name, **kwargs)


def controller(
    isvcs: LocalFleetInferenceServices, prometheus: str, policies: FakeCanaryPolicies
) -> LocalRollouts:
    """A fresh controller process: all it shares with an earlier one is the policy (status)."""
    built = Controller(
        isvcs=isvcs, policies=policies, events=FakeEvents(), prometheus=HttpPrometheus(prometheus),
        metrics=CanaryMetrics(), min_interval_seconds=LOCAL_MIN_INTERVAL_S,
    )  # fmt: skip
    return LocalRollouts(built, policies, NS, tick_s=0.5)


def policies() -> FakeCanaryPolicies:
    store = FakeCanaryPolicies()
    store.add({"metadata": {"name": DEFAULT_POLICY, "namespace": NS}, "spec": POLICY})
    return store


def rollout(store: FakeCanaryPolicies) -> RolloutStatus | None:
    policy = store.get(NS, DEFAULT_POLICY)
    return None if policy is None else rollout_of(policy, MODEL)


def is_final(store: FakeCanaryPolicies) -> bool:
    status = rollout(store)
    return status is not None and status.phase.final


def wait_for(done: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.1)


class Traffic:
    """NoisyTraffic to the model on a thread until the rollout is final."""

    def __init__(self, fleet: LocalFleet, store: FakeCanaryPolicies, *, seed: int) -> None:
        self.noisy = NoisyTraffic(fleet, region=REGION, model=MODEL, seed=seed)
        self.store = store
        self.results: list[Any] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.results = self.noisy.until(lambda: is_final(self.store), max_s=MAX_S)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(timeout=MAX_S + 60)

    @property
    def lost(self) -> list[str]:
        return [f"{r.status} {r.error}" for r in self.results if not r.ok]


def moved(decisions: list[tuple[str, Decision]]) -> list[str]:
    """The decisions that move traffic, with their reasons."""
    verbs = {Verb.ADVANCE, Verb.PROMOTE, Verb.ROLLBACK}
    return [f"{d.verb}: {d.reason}" for _, d in decisions if d.verb in verbs]


def test_prometheus_down_mid_rollout_halts_the_canary_which_then_resumes_and_promotes(
    fleet: tuple[LocalFleet, str],
) -> None:
    local, prometheus = fleet
    revision = local.create_revision(REGION, MODEL)
    store = policies()
    rollouts = controller(LocalFleetInferenceServices(local, region=REGION), prometheus, store)
    with Traffic(local, store, seed=11) as traffic, rollouts.running():
        wait_for(lambda: (s := rollout(store)) is not None and s.weight >= 20,
                 timeout_s=MAX_S, what="the first step")  # fmt: skip
        local.stop_prometheus()
        blind_from = len(rollouts.decisions)
        time.sleep(OUTAGE_S)
        blind = rollouts.decisions[blind_from:]
        local.start_prometheus_again()
        wait_for(lambda: is_final(store), timeout_s=MAX_S, what="a final phase")
    status = rollout(store)
    assert status is not None and status.canary_revision == revision
    halts = [d.reason for _, d in blind if d.verb is Verb.HALT]
    print(f"\nwhile blind: {len(blind)} decisions, {len(halts)} halts ({halts[:1]})")
    assert moved(blind) == [], "traffic moved while Prometheus was down"
    assert halts, "the controller did not halt while Prometheus was down"
    assert status.phase is Phase.PROMOTED, rollouts.decisions[-1][1].reason
    assert traffic.lost == []


def test_a_controller_killed_between_recording_a_step_and_moving_traffic_resumes_from_status(
    fleet: tuple[LocalFleet, str],
) -> None:
    local, prometheus = fleet
    local.create_revision(REGION, MODEL)
    store = policies()
    dying = DyingInferenceServices(local, die_at=35)
    first = controller(dying, prometheus, store)
    with Traffic(local, store, seed=12) as traffic:
        with first.running():
            wait_for(dying.died.is_set, timeout_s=MAX_S, what="the kill")
        recorded = rollout(store)
        assert recorded is not None and recorded.weight == 35
        assert local.revisions(REGION, MODEL).canary_percent == 20, "the move happened"
        survivor = DyingInferenceServices(local, die_at=-1)  # records, never dies
        second = controller(survivor, prometheus, store)
        with second.running():
            wait_for(lambda: is_final(store), timeout_s=MAX_S, what="a final phase")
    status = rollout(store)
    assert status is not None and status.phase is Phase.PROMOTED, second.decisions[-1][1].reason
    verbs = [d.verb for _, d in second.decisions if d.verb is not Verb.HOLD]
    print(f"\nafter the restart: {[str(v) for v in verbs]}; moves {survivor.moves}")
    assert Verb.ROLLBACK not in verbs
    percents = [p for p in survivor.moves if p is not None]
    assert percents[:1] == [35], "the recorded step was not re-asserted first"
    assert percents == sorted(percents), "the canary stepped back"
    assert traffic.lost == []
