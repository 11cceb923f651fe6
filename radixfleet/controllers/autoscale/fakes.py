"""In-memory fakes of the autoscaler's Kubernetes ports, for tests and local runs.

They keep every call they saw and can be told to fail the next one. `FakeRevisions` also plays
Knative's part where the controller depends on it: scale annotations written on a Revision land
on its PodAutoscaler too, and `settle` moves the Revision's replica counts to its bounds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from radixfleet.controllers.autoscale.knative import DELETION_COST, MIN_SCALE, REVISION_LABEL
from radixfleet.kit.errors import KubeError


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta["namespace"], meta["name"]


@dataclass
class FakeInferenceServices:
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def add(self, isvc: dict[str, Any]) -> None:
        self.items[_key(isvc)] = copy.deepcopy(isvc)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.items.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None


@dataclass(frozen=True)
class ScaleCall:
    namespace: str
    name: str
    annotations: dict[str, str]


@dataclass
class FakeRevisions:
    """Revisions by (namespace, name); `set_scale` records and applies the annotations."""

    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[ScaleCall] = field(default_factory=list)
    next_error: KubeError | None = None

    def add(self, revision: dict[str, Any]) -> None:
        self.items[_key(revision)] = copy.deepcopy(revision)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.items.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def set_scale(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.calls.append(ScaleCall(namespace, name, dict(annotations)))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        meta = self.items[(namespace, name)]["metadata"]
        meta.setdefault("annotations", {}).update(annotations)

    def settle(self, namespace: str, name: str) -> None:
        """What Knative would do next: the pods follow min-scale (all ready at once)."""
        revision = self.items[(namespace, name)]
        wanted = int(revision["metadata"].get("annotations", {}).get(MIN_SCALE, "0"))
        revision.setdefault("status", {}).update(actualReplicas=wanted, desiredReplicas=wanted)


@dataclass(frozen=True)
class CostCall:
    namespace: str
    name: str
    cost: int


@dataclass
class FakePods:
    """Pods by (namespace, name); records deletion costs."""

    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[CostCall] = field(default_factory=list)

    def add(self, namespace: str, name: str, revision: str) -> None:
        meta = {"namespace": namespace, "name": name, "labels": {REVISION_LABEL: revision}}
        self.items[(namespace, name)] = {"metadata": meta}

    def of_revision(self, namespace: str, revision: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(pod)
            for (ns, _), pod in sorted(self.items.items())
            if ns == namespace and pod["metadata"]["labels"].get(REVISION_LABEL) == revision
        ]

    def set_deletion_cost(self, namespace: str, name: str, cost: int) -> None:
        self.calls.append(CostCall(namespace, name, cost))
        meta = self.items[(namespace, name)]["metadata"]
        meta.setdefault("annotations", {})[DELETION_COST] = str(cost)


@dataclass
class FakeAutoscalePolicies:
    """AutoscalePolicies by (namespace, name); records status writes."""

    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    status_writes: list[dict[str, Any]] = field(default_factory=list)
    next_error: KubeError | None = None

    def add(self, policy: dict[str, Any]) -> None:
        self.items[_key(policy)] = copy.deepcopy(policy)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.items.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        self.items[(namespace, name)]["status"] = copy.deepcopy(status)
        self.status_writes.append(copy.deepcopy(status))


@dataclass
class FakeWaker:
    """Records the URLs it was asked to wake."""

    calls: list[str] = field(default_factory=list)

    def wake(self, url: str) -> None:
        self.calls.append(url)
