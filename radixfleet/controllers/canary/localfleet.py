"""The canary controller on the local fleet: the same observe, decide and act, the fleet as KServe.

`LocalFleetInferenceServices` is the InferenceServices port over one region of a `LocalFleet`. Each
model is an InferenceService of that name whose predictor status tells the fleet's revisions as
KServe would: `latestCreatedRevision` is the canary while there is one, `latestRolledoutRevision`
the stable one, `latestReadyRevision` the canary once one of its replicas is ready; its
`canaryTrafficPercent` is the entry's split. Setting the percent moves the split, removing it
promotes (the old revision is retired), 0 rolls back and keeps the canary pinned.
`LocalFleetBaselines` is the Baselines port: a policy with `baseline: true` gets the stable revision
on as many fresh replicas as the canary has ready, behind a router of their own
(`LocalFleet.set_baseline`).

`LocalRollouts` ticks the real `Controller` over that port on a thread, as kopf's timer does in a
cluster, with the CanaryPolicy and the Events held in memory (`radixfleet.controllers.canary.fakes`)
and the fleet's real Prometheus answering the canary's PromQL. `roll_out` creates a revision with
given faults and rolls it out under `NoisyTraffic` (the tests and benchmarks/canary_localfleet.py
use both).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from radixfleet.adapters.prometheus import HttpPrometheus
from radixfleet.controllers.canary.controller import Controller
from radixfleet.controllers.canary.decide import Decision
from radixfleet.controllers.canary.fakes import FakeCanaryPolicies, FakeEvents
from radixfleet.controllers.canary.metrics import CanaryMetrics
from radixfleet.controllers.canary.ports import StaleRevisionError
from radixfleet.controllers.canary.spec import POLICY_ANNOTATION
from radixfleet.controllers.canary.state import RolloutStatus, rollout_of
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet import LocalFleet
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import RequestResult, WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.traces import TraceRequest

log = logging.getLogger(__name__)

DEFAULT_POLICY = "default"
LOCAL_MIN_INTERVAL_S = 1  # the fleet's Prometheus scrapes every second


class LocalFleetInferenceServices:
    """The InferenceServices port over one region of a local fleet."""

    def __init__(self, fleet: LocalFleet, *, region: str, policy: str = DEFAULT_POLICY) -> None:
        self.fleet = fleet
        self.region = region
        self.policy = policy

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        models = self.fleet.spec.region(self.region).models
        return [self._isvc(m.name, namespace) for m in models if m.namespace == namespace]

    def set_canary_percent(
        self, namespace: str, name: str, *, percent: int | None, canary_revision: str
    ) -> None:
        # The cluster adapter re-checks the canary in its JSON patch; here a read first will do:
        # nothing but this controller creates or promotes revisions while it runs.
        latest = self.fleet.revisions(self.region, name).latest
        if latest != canary_revision:
            raise StaleRevisionError(f"{name}: the canary is now {latest}", status=422)
        if percent is None:
            self.fleet.promote(self.region, name)
        else:
            self.fleet.set_canary_percent(self.region, name, percent)

    def _isvc(self, model: str, namespace: str) -> dict[str, Any]:
        revisions = self.fleet.revisions(self.region, model)
        predictor: dict[str, Any] = {}
        if revisions.canary is not None:
            predictor["canaryTrafficPercent"] = revisions.canary_percent
        ready = revisions.latest if revisions.canary_ready else revisions.stable
        return {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {
                "name": model,
                "namespace": namespace,
                "annotations": {POLICY_ANNOTATION: self.policy},
            },
            "spec": {"predictor": predictor},
            "status": {
                "components": {
                    "predictor": {
                        "latestCreatedRevision": revisions.latest,
                        "latestReadyRevision": ready,
                        "latestRolledoutRevision": revisions.stable,
                    }
                }
            },
        }


class LocalFleetBaselines:
    """The Baselines port over one region of a local fleet."""

    def __init__(self, fleet: LocalFleet, *, region: str) -> None:
        self.fleet = fleet
        self.region = region

    def ensure(
        self, namespace: str, name: str, *, stable_revision: str, canary_revision: str
    ) -> int:
        revisions = self.fleet.revisions(self.region, name)
        if (revisions.stable, revisions.canary) != (stable_revision, canary_revision):
            raise StaleRevisionError(f"{name}: the revisions are now {revisions}", status=422)
        return self.fleet.set_baseline(self.region, name, max(1, revisions.canary_ready))

    def release(self, namespace: str, name: str) -> None:
        self.fleet.set_baseline(self.region, name, 0)


@dataclass
class LocalRollouts:
    """The canary controller ticking over one region of a local fleet, on its own thread."""

    controller: Controller
    policies: FakeCanaryPolicies
    namespace: str
    policy: str = DEFAULT_POLICY
    tick_s: float = 1.0
    decisions: list[tuple[str, Decision]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @classmethod
    def for_fleet(
        cls,
        fleet: LocalFleet,
        *,
        region: str,
        namespace: str,
        spec: Mapping[str, Any],
        prometheus_url: str,
        tick_s: float = 1.0,
    ) -> LocalRollouts:
        """A controller over `region` of `fleet`, under one CanaryPolicy with `spec`."""
        policies = FakeCanaryPolicies()
        policies.add({"metadata": {"name": DEFAULT_POLICY, "namespace": namespace}, "spec": spec})
        controller = Controller(
            isvcs=LocalFleetInferenceServices(fleet, region=region),
            policies=policies,
            events=FakeEvents(),
            prometheus=HttpPrometheus(prometheus_url),
            metrics=CanaryMetrics(),
            min_interval_seconds=LOCAL_MIN_INTERVAL_S,
            baselines=LocalFleetBaselines(fleet, region=region),
        )
        return cls(controller, policies, namespace, tick_s=tick_s)

    def tick(self, *, now: datetime | None = None) -> list[Decision]:
        """One pass over every InferenceService under the policy."""
        policy = self.policies.get(self.namespace, self.policy)
        assert policy is not None
        decided = self.controller.reconcile_policy(policy, now=now or datetime.now(UTC))
        for decision in decided:
            if decision.status is not None:
                self.decisions.append((decision.status.inference_service, decision))
        return decided

    def rollout(self, isvc: str) -> RolloutStatus | None:
        """The recorded rollout of `isvc`, as the policy's status holds it."""
        policy = self.policies.get(self.namespace, self.policy)
        return None if policy is None else rollout_of(policy, isvc)

    @contextmanager
    def running(self) -> Iterator[LocalRollouts]:
        """Tick every `tick_s` on a thread until the block ends."""
        stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(stop,), name="canary", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=30)

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception as error:  # a failed tick is retried on the next, as kopf does
                log.warning("canary tick failed: %s", error)
                self.errors.append(str(error))


class NoisyTraffic:
    """Poisson arrivals of uneven prompts to one model, sent in chunks until told to stop.

    Prompts of 100 to 1,000 tokens (log-uniform) and 4 to 16 output tokens, so a window's p95
    rests on a few dozen uneven requests. Clients retry a 5xx answered before any token once
    (`Replayer(retries=1)`), as OpenAI's SDK does.
    """

    def __init__(
        self, fleet: LocalFleet, *, region: str, model: str, seed: int, rate: float = 40.0
    ) -> None:
        self.entries = fleet.entry_urls()
        self.region, self.model, self.rate = region, model, rate
        self.synth = PromptSynth(load_tokenizer(fleet.cache_dir), salt=seed)
        self.rng = random.Random(seed)
        self.sent = 0
        self.chunk_s = 1.0

    def until(self, done: Callable[[], bool], *, max_s: float) -> list[RequestResult]:
        """Send until `done()` (and one chunk more, across the switch) or `max_s` passes."""
        return asyncio.run(self._open_loop(done, max_s=max_s))

    async def _open_loop(self, done: Callable[[], bool], *, max_s: float) -> list[RequestResult]:
        # Chunks overlap: the next one starts when this one's arrivals end, whatever is still
        # in flight, so the arrival rate holds however slow the answers are.
        chunks = []
        deadline = time.monotonic() + max_s
        last = False
        while not last and time.monotonic() < deadline:
            last = done()
            replayer = Replayer(entries=self.entries, retries=1, lead_s=0.0)
            chunks.append(asyncio.create_task(replayer.run(self._chunk())))
            await asyncio.sleep(self.chunk_s)
        return [result for chunk in await asyncio.gather(*chunks) for result in chunk]

    def _chunk(self) -> list[WorkItem]:
        items, at = [], self.rng.expovariate(self.rate)
        while at < self.chunk_s:
            tokens = round(math.exp(self.rng.uniform(math.log(100), math.log(1000))))
            prompt = self.synth.prompt(TraceRequest(at, tokens, 0), index=self.sent)
            items.append(WorkItem(at, self.region, self.model, prompt, self.rng.randint(4, 16)))
            self.sent += 1
            at += self.rng.expovariate(self.rate)
        return items


@dataclass(frozen=True)
class RolloutRun:
    """One rollout on the local fleet: its final status, the clients' results, the controller."""

    status: RolloutStatus
    results: list[RequestResult]
    rollouts: LocalRollouts
    revision: str

    @property
    def lost(self) -> list[str]:
        """Requests that failed even after the client's retry."""
        return [f"{r.status} {r.error}" for r in self.results if not r.ok]

    def history(self) -> str:
        """Every decision but the holds, one a line."""
        return "\n".join(
            f"{d.verb}: {d.reason}" for _, d in self.rollouts.decisions if d.verb != "hold"
        )


def roll_out(
    fleet: LocalFleet,
    prometheus: str,
    *,
    region: str,
    model: str,
    namespace: str,
    spec: Mapping[str, Any],
    seed: int,
    slowdown: float = 1.0,
    errors: float = 0.0,
    max_s: float = 45.0,
) -> RolloutRun:
    """Create a revision of `model` with these faults; let the controller roll it out under
    `NoisyTraffic` until the rollout is final or `max_s` passes."""
    revision = fleet.create_revision(region, model)
    fleet.set_faults(region, model, revision=revision, slowdown=slowdown, error_rate=errors)
    rollouts = LocalRollouts.for_fleet(
        fleet, region=region, namespace=namespace, spec=spec, prometheus_url=prometheus,
        tick_s=0.5,
    )  # fmt: skip

    def final() -> bool:
        status = rollouts.rollout(model)
        return status is not None and status.phase.final

    traffic = NoisyTraffic(fleet, region=region, model=model, seed=seed)
    with rollouts.running():
        results = traffic.until(final, max_s=max_s)
    status = rollouts.rollout(model)
    if status is None or status.canary_revision != revision:
        raise RuntimeError(f"no rollout of {revision} was recorded: {rollouts.errors}")
    return RolloutRun(status, results, rollouts, revision)
