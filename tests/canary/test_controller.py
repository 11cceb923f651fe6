"""The act layer on recording fakes: whole rollouts in virtual time, restarts, lost writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from radixfleet.adapters.prometheus import MetricsUnavailable
from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.controllers.canary.controller import Controller, register, run_tick, to_wire
from radixfleet.controllers.canary.fakes import (
    FakeBaselines,
    FakeCanaryPolicies,
    FakeEvents,
    FakeInferenceServices,
)
from radixfleet.controllers.canary.ports import StaleRevisionError
from radixfleet.controllers.canary.queries import (
    REQUESTS,
    QueryConfig,
    histogram_queries,
    revision_queries,
)
from radixfleet.controllers.canary.spec import POLICY_ANNOTATION, Metric
from radixfleet.controllers.canary.state import BaselineStatus, Phase, Verb, rollout_of
from radixfleet.kit.errors import KubeError

NS, NAME, POLICY = "team-a", "llama", "default"
STABLE, CANARY = "llama-predictor-00001", "llama-predictor-00002"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TICK = timedelta(seconds=10)
GOOD = {REQUESTS: 300.0, Metric.TTFT_P95: 0.20, Metric.ITL_P95: 0.020, Metric.ERROR_RATE: 0.0}


def isvc(*, percent: int | None = 0, ready: bool = True) -> dict[str, Any]:
    predictor: dict[str, Any] = {"model": {"modelFormat": {"name": "sglang"}}}
    if percent is not None:
        predictor["canaryTrafficPercent"] = percent
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": NAME, "namespace": NS, "annotations": {POLICY_ANNOTATION: POLICY}},
        "spec": {"predictor": predictor},
        "status": {
            "components": {
                "predictor": {
                    "latestCreatedRevision": CANARY,
                    "latestReadyRevision": CANARY if ready else STABLE,
                    "latestRolledoutRevision": STABLE,
                }
            }
        },
    }


def policy(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": POLICY, "namespace": NS}, "spec": spec}


def answers(
    canary: dict[str, float],
    stable: dict[str, float] = GOOD,
    *,
    namespace: str = NS,
    baseline: dict[str, float] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sides = [(CANARY, canary, False), (STABLE, stable, False)]
    if baseline is not None:
        sides.append((STABLE, baseline, True))
    for revision, values, pool in sides:
        queries = revision_queries(
            namespace=namespace, revision=revision, window_seconds=60, config=QueryConfig(),
            baseline=pool,
        )  # fmt: skip
        out |= {queries[key]: value for key, value in values.items()}
    return out


class Fleet:
    """The fakes and a controller over them, ticking in virtual time."""

    def __init__(
        self,
        prometheus: FakePrometheus,
        *,
        spec: dict[str, Any] | None = None,
        baselines: FakeBaselines | None = None,
    ) -> None:
        self.isvcs, self.policies, self.events = (
            FakeInferenceServices(), FakeCanaryPolicies(), FakeEvents(),
        )  # fmt: skip
        self.baselines = baselines
        self.isvcs.add(isvc())
        self.policies.add(policy(**(spec or {})))
        self.prometheus = prometheus
        self.now = T0
        self.controller = self.restart()

    def restart(self) -> Controller:
        self.controller = Controller(
            self.isvcs, self.policies, self.events, self.prometheus, baselines=self.baselines
        )
        return self.controller

    def tick(self, n: int = 1) -> list[Verb]:
        verbs = []
        for _ in range(n):
            current = self.policies.get(NS, POLICY)
            assert current is not None
            verbs += [d.verb for d in self.controller.reconcile_policy(current, now=self.now)]
            self.now += TICK
        return verbs

    @property
    def percents(self) -> list[int | None]:
        return [call.percent for call in self.isvcs.calls]

    def rollout(self) -> Any:
        current = self.policies.get(NS, POLICY)
        assert current is not None
        return rollout_of(current, NAME)


def test_a_good_canary_walks_every_step_and_is_promoted() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    verbs = fleet.tick(30)
    assert fleet.percents == [5, 20, 50, None]
    assert verbs.count(Verb.ADVANCE) == 3 and verbs.count(Verb.PROMOTE) == 1
    assert fleet.rollout().phase is Phase.PROMOTED
    assert [e.reason for e in fleet.events.calls] == [
        *("CanaryAdvance", "CanaryAdvance", "CanaryAdvance", "CanaryPromote"),
    ]
    # After promotion KServe rolled the canary out: nothing left to do, nothing queried.
    asked = len(fleet.prometheus.queries)
    assert fleet.tick(5) == [Verb.HOLD] * 5 and len(fleet.prometheus.queries) == asked


def test_prometheus_is_asked_only_when_an_analysis_is_due() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.tick(6)  # advance to 5% at t=0, then 50 s of waiting
    assert fleet.prometheus.queries == []
    fleet.tick(1)  # t=60 s: the first analysis
    histograms = {
        q
        for revision in (CANARY, STABLE)
        for q in histogram_queries(
            namespace=NS, revision=revision, window_seconds=60, config=QueryConfig()
        ).values()
    }
    assert {q for q, _ in fleet.prometheus.queries} == set(answers(GOOD)) | histograms
    assert {at for _, at in fleet.prometheus.queries} == {T0 + 6 * TICK}


def test_a_slow_canary_is_rolled_back_after_threshold_failed_analyses() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD | {Metric.TTFT_P95: 0.40})))
    fleet.tick(20)
    assert fleet.percents == [5, 0]
    rollout = fleet.rollout()
    assert (rollout.phase, rollout.weight, rollout.failed_checks) == (Phase.ROLLED_BACK, 0, 2)
    assert "ttftP95 0.4 > bound 0.25" in rollout.last_decision.reason
    warnings = [e for e in fleet.events.calls if e.warning]
    assert [e.reason for e in warnings] == ["CanaryRollback"]
    assert [e.reason for e in fleet.events.calls].count("CanaryHold") == 1  # the first failure


def test_missing_metrics_halt_and_say_so_once() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD | {Metric.ITL_P95: float("nan")})))
    verbs = fleet.tick(30)
    assert fleet.percents == [5]
    assert Verb.ROLLBACK not in verbs and Verb.PROMOTE not in verbs
    rollout = fleet.rollout()
    assert rollout.phase is Phase.HALTED and "no data for itlP95" in rollout.last_decision.reason
    assert [e.reason for e in fleet.events.calls] == ["CanaryAdvance", "CanaryHalt"]
    assert fleet.events.calls[-1].warning


def test_prometheus_down_halts_with_its_status() -> None:
    prometheus = FakePrometheus(answers(GOOD))
    fleet = Fleet(prometheus)
    fleet.tick(6)
    prometheus.next_error = MetricsUnavailable("HTTP 503 unavailable", query="q", status=503)
    assert fleet.tick(1) == [Verb.HALT]
    assert "Prometheus failed: HTTP 503" in fleet.rollout().last_decision.reason
    assert fleet.tick(1) == [Verb.ADVANCE]  # retried on the next tick, not an interval later


def test_a_restarted_controller_resumes_mid_rollout() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.tick(8)
    assert fleet.percents == [5, 20]
    fleet.restart()  # a new process: nothing in memory, everything from the CR's status
    fleet.tick(30)
    assert fleet.percents == [5, 20, 50, None]


def test_status_is_written_before_traffic_moves() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.policies.next_error = KubeError("etcd timeout", status=504)
    with pytest.raises(KubeError):
        fleet.tick()
    assert fleet.isvcs.calls == []  # nothing moved without a record of it


def test_a_lost_traffic_patch_is_repaired_from_the_status() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.tick(6)
    fleet.isvcs.next_error = KubeError("connection reset", status=None)
    with pytest.raises(KubeError):
        fleet.tick()  # the advance to 20% is recorded, then its patch is lost
    assert fleet.rollout().weight == 20
    fleet.tick()
    assert fleet.percents[-1] == 20
    assert fleet.isvcs.items[(NS, NAME)]["spec"]["predictor"]["canaryTrafficPercent"] == 20


def test_a_newer_revision_mid_action_is_not_touched() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.isvcs.next_error = StaleRevisionError("test failed", status=422)
    assert fleet.tick() == [Verb.ADVANCE]
    assert fleet.events.calls == []  # nothing happened, so nothing is announced


def test_commands_on_the_policy_pause_and_abort() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.tick()
    fleet.policies.annotate(NS, POLICY, {f"pause.canary.radixfleet.io/{NAME}": "true"})
    fleet.tick(20)
    assert fleet.percents == [5] and fleet.rollout().phase is Phase.PAUSED
    fleet.policies.annotate(NS, POLICY, {f"abort.canary.radixfleet.io/{NAME}": CANARY})
    fleet.tick()
    assert fleet.percents == [5, 0] and fleet.rollout().phase is Phase.ROLLED_BACK


def test_an_unready_canary_is_pinned_at_0_and_waits() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.isvcs.add(isvc(percent=None, ready=False))
    fleet.tick(3)
    assert fleet.percents == [0] and fleet.rollout().phase is Phase.WAITING


def test_other_inference_services_are_left_alone() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    other = isvc()
    other["metadata"] |= {"name": "other", "annotations": {}}
    fleet.isvcs.add(other)
    fleet.tick(3)
    assert {call.name for call in fleet.isvcs.calls} == {NAME}


def test_the_status_says_which_generation_of_the_policy_it_decided_on() -> None:
    """Kubernetes' convention (kstatus, Argo CD): a status is current for the spec only when
    its observedGeneration equals metadata.generation."""
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.policies.items[(NS, POLICY)]["metadata"]["generation"] = 7
    fleet.tick(2)
    current = fleet.policies.get(NS, POLICY)
    assert current is not None and current["status"]["observedGeneration"] == 7


# A twice-slower canary at 5%: as slow as the busy stable replicas, twice its baseline's.
BUSY = GOOD | {Metric.TTFT_P95: 0.40, Metric.ITL_P95: 0.040}
AT_THE_CANARYS_LOAD = GOOD | {REQUESTS: 60.0}


@pytest.mark.parametrize(
    ("asks", "baselines", "verdict"),
    [
        (True, FakeBaselines(), Phase.ROLLED_BACK),
        (False, FakeBaselines(), Phase.PROMOTED),
        (True, None, Phase.PROMOTED),
        (True, FakeBaselines(ready=None), Phase.PROMOTED),
    ],
    ids=["baseline-asked-and-run", "not-asked", "asked-where-none-can-run", "none-can-be-made"],
)
def test_a_policy_with_a_baseline_judges_the_canary_against_it(
    asks: bool, baselines: FakeBaselines | None, verdict: Phase
) -> None:
    prometheus = FakePrometheus(answers(BUSY, BUSY, baseline=AT_THE_CANARYS_LOAD))
    fleet = Fleet(prometheus, spec={"baseline": asks}, baselines=baselines)
    fleet.tick(40)
    rollout = fleet.rollout()
    assert rollout.phase is verdict
    if verdict is Phase.ROLLED_BACK:
        assert "baseline 0.2" in rollout.last_decision.reason
        assert rollout.measured.baseline.requests == 60.0
    else:  # against the stable revision (the reasons say so), as before the baseline
        assert rollout.measured.baseline is None
        assert not any('pool="baseline"' in q for q, _ in prometheus.queries)


def test_the_baseline_runs_while_the_rollout_does_and_is_released_after() -> None:
    baselines = FakeBaselines()
    fleet = Fleet(FakePrometheus(answers(GOOD, baseline=GOOD)), spec={"baseline": True},
                  baselines=baselines)  # fmt: skip
    fleet.tick(3)
    assert baselines.running == {(NS, NAME): (STABLE, CANARY)}
    assert [call for call, *_ in baselines.calls] == ["ensure"] * 3
    # recorded for the entry, which sends the baseline the canary's share once one is ready
    assert fleet.rollout().baseline == BaselineStatus(revision=STABLE, ready=1)
    fleet.tick(30)
    assert fleet.rollout().phase is Phase.PROMOTED
    assert baselines.running == {} and fleet.rollout().baseline is None
    assert baselines.calls[-1] == ("release", NS, NAME)  # every tick after: idempotent
    fleet.restart()
    baselines.running[(NS, NAME)] = (STABLE, CANARY)  # one the last process left behind
    fleet.tick()
    assert baselines.running == {}


def test_the_stable_revision_keeps_every_pod_until_the_canary_is_ready() -> None:
    baselines = FakeBaselines()
    fleet = Fleet(FakePrometheus(answers(GOOD, baseline=GOOD)), spec={"baseline": True},
                  baselines=baselines)  # fmt: skip
    fleet.isvcs.add(isvc(percent=0, ready=False))
    fleet.tick(3)
    assert baselines.running == {} and fleet.rollout().baseline is None
    fleet.isvcs.add(isvc(percent=0, ready=True))
    fleet.tick()
    assert baselines.running == {(NS, NAME): (STABLE, CANARY)}


def test_a_baseline_that_cannot_follow_a_moved_revision_waits_for_the_next_tick() -> None:
    baselines = FakeBaselines(next_error=StaleRevisionError("a newer canary", status=422))
    fleet = Fleet(FakePrometheus(answers(GOOD, baseline=GOOD)), spec={"baseline": True},
                  baselines=baselines)  # fmt: skip
    assert fleet.tick() == [Verb.ADVANCE]  # the rollout goes on; the baseline follows next
    assert baselines.running == {}
    fleet.tick()
    assert baselines.running == {(NS, NAME): (STABLE, CANARY)}


def test_status_on_the_wire_has_no_nulls_or_nans() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD | {Metric.ITL_P95: float("nan")})))
    fleet.tick(8)
    wire = fleet.policies.status_writes[-1]
    assert "itlP95" not in wire["measured"]["canary"]
    assert to_wire(fleet.rollout()) == wire


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (KubeError("busy", status=503), kopf.TemporaryError),
        (KubeError("no response", status=None), kopf.TemporaryError),
        (KubeError("forbidden", status=403), kopf.PermanentError),
    ],
    ids=["503-retries", "no-response-retries", "403-gives-up"],
)
def test_tick_errors_become_kopf_retries_or_not(error: KubeError, expected: type) -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.policies.next_error = error
    body = fleet.policies.get(NS, POLICY)
    assert body is not None
    with pytest.raises(expected):
        run_tick(fleet.controller, body, now=T0)


def test_an_invalid_policy_is_a_permanent_error() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    with pytest.raises(kopf.PermanentError, match="invalid CanaryPolicy"):
        run_tick(fleet.controller, policy(steps=[50, 5]), now=T0)


def test_register_adds_a_timer_on_canary_policies() -> None:
    registry = kopf.OperatorRegistry()
    register(registry, Fleet(FakePrometheus()).controller)
    timers = registry._spawning.get_all_handlers()  # kopf has no public listing
    assert [(h.id, h.interval) for h in timers] == [("canary-tick", 10)]
