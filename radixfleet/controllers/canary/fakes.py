"""In-memory fakes of the canary's Kubernetes ports, for tests, the local fleet and the twin.

They keep every call they saw and can be told to fail the next one. `FakeInferenceServices`
also plays KServe's part where the controller depends on it: removing canaryTrafficPercent
rolls the latest revision out, and a JSON-patch re-check fails when the canary has changed.
`FakeBaselines` keeps which baselines run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from radixfleet.controllers.canary.ports import StaleRevisionError, merge_rollout
from radixfleet.kit.errors import KubeError


@dataclass(frozen=True)
class TrafficCall:
    namespace: str
    name: str
    percent: int | None
    canary_revision: str


@dataclass
class FakeInferenceServices:
    """InferenceServices by (namespace, name), with KServe's promotion bookkeeping."""

    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[TrafficCall] = field(default_factory=list)
    next_error: KubeError | None = None

    def add(self, isvc: dict[str, Any]) -> None:
        meta = isvc["metadata"]
        self.items[(meta["namespace"], meta["name"])] = copy.deepcopy(isvc)

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(v) for (ns, _), v in sorted(self.items.items()) if ns == namespace]

    def set_canary_percent(
        self, namespace: str, name: str, *, percent: int | None, canary_revision: str
    ) -> None:
        self.calls.append(TrafficCall(namespace, name, percent, canary_revision))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        isvc = self.items[(namespace, name)]
        predictor = isvc["status"]["components"]["predictor"]
        if predictor.get("latestCreatedRevision") != canary_revision:
            raise StaleRevisionError(f"{name}: canary is no longer {canary_revision}", status=422)
        if percent is None:
            isvc["spec"]["predictor"].pop("canaryTrafficPercent", None)
            # KServe: all traffic on the latest ready revision makes it the rolled-out one.
            predictor["latestRolledoutRevision"] = predictor.get("latestReadyRevision")
        else:
            isvc["spec"]["predictor"]["canaryTrafficPercent"] = percent


@dataclass
class FakeCanaryPolicies:
    """CanaryPolicies by (namespace, name); records status writes and annotations."""

    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    status_writes: list[dict[str, Any]] = field(default_factory=list)
    next_error: KubeError | None = None

    def add(self, policy: dict[str, Any]) -> None:
        meta = policy["metadata"]
        self.items[(meta["namespace"], meta["name"])] = copy.deepcopy(policy)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.items.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def write_rollout(
        self, namespace: str, name: str, rollout: dict[str, Any], *, generation: int | None = None
    ) -> None:
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        policy = self.items[(namespace, name)]
        status = policy.get("status") or {}
        policy["status"] = merge_rollout(status, copy.deepcopy(rollout), generation)
        self.status_writes.append(copy.deepcopy(rollout))

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        current = self.items[(namespace, name)]["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value


@dataclass(frozen=True)
class EventCall:
    name: str
    reason: str
    message: str
    warning: bool


@dataclass
class FakeEvents:
    """Keeps the Events the controller posts."""

    calls: list[EventCall] = field(default_factory=list)

    def emit(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None:
        self.calls.append(EventCall(involved["metadata"]["name"], reason, message, warning))


@dataclass
class FakeBaselines:
    """Baselines by (namespace, name): the stable revision each runs beside which canary, with
    `ready` replicas (None: none can be made). Calls are kept as ("ensure" | "release",
    namespace, name)."""

    running: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    ready: int | None = 1
    next_error: KubeError | None = None

    def ensure(
        self, namespace: str, name: str, *, stable_revision: str, canary_revision: str
    ) -> int | None:
        self.calls.append(("ensure", namespace, name))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        self.running[(namespace, name)] = (stable_revision, canary_revision)
        return self.ready

    def release(self, namespace: str, name: str) -> None:
        self.calls.append(("release", namespace, name))
        self.running.pop((namespace, name), None)
