"""In-memory fakes of the quota controller's ports, for tests, the local fleet and the twin.

They keep every call they saw and can be told to fail the next one. `FakeResourceQuotas`
also plays the API server's quota admission where tests depend on it: `used` is whatever the
test says is running.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from radixfleet.controllers.quota.carry import Stored
from radixfleet.controllers.quota.spec import GPU_QUOTA_RESOURCE, SecretKeyRef
from radixfleet.kit.errors import KubeError


def _fail(error: KubeError | None) -> None:
    if error is not None:
        raise error


@dataclass
class FakeTenants:
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    status_writes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    next_error: KubeError | None = None

    def add(self, tenant: dict[str, Any]) -> None:
        self.items[tenant["metadata"]["name"]] = copy.deepcopy(tenant)

    def list(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(t) for _, t in sorted(self.items.items())]

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        error, self.next_error = self.next_error, None
        _fail(error)
        self.items[name]["status"] = copy.deepcopy(status)
        self.status_writes.append((name, copy.deepcopy(status)))


@dataclass
class FakeInferenceServices:
    items: list[dict[str, Any]] = field(default_factory=list)

    def everywhere(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.items)


@dataclass
class FakeResourceQuotas:
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, int]] = field(default_factory=list)  # (namespace, tenant, gpus)
    next_error: KubeError | None = None

    def get(self, namespace: str) -> dict[str, Any] | None:
        found = self.items.get(namespace)
        return copy.deepcopy(found) if found is not None else None

    def set_hard(self, namespace: str, *, tenant: str, gpus: int) -> None:
        self.calls.append((namespace, tenant, gpus))
        error, self.next_error = self.next_error, None
        _fail(error)
        quota = self.items.setdefault(namespace, {"spec": {"hard": {}}, "status": {"used": {}}})
        quota["spec"]["hard"][GPU_QUOTA_RESOURCE] = str(gpus)

    def set_used(self, namespace: str, gpus: int) -> None:
        quota = self.items.setdefault(namespace, {"spec": {"hard": {}}, "status": {"used": {}}})
        quota["status"]["used"][GPU_QUOTA_RESOURCE] = str(gpus)


@dataclass
class FakeSecrets:
    keys: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ns, name, key)

    def key(self, ref: SecretKeyRef) -> str | None:
        return self.keys.get((ref.namespace, ref.name, ref.key))


@dataclass
class FakeLedgerStore:
    """The entry replicas' ledger ConfigMap (radixfleet/controllers/quota/carry.py): entries by
    replica, and a version that every write moves on, as a resourceVersion does; a claim from a
    stale version is refused, as the API server's 409 refuses it."""

    entries: dict[str, str] = field(default_factory=dict)
    version: int = 1
    claims: list[tuple[str, ...]] = field(default_factory=list)
    next_error: KubeError | None = None

    def read(self) -> Stored:
        error, self.next_error = self.next_error, None
        _fail(error)
        return Stored(str(self.version), dict(self.entries))

    def claim(self, version: str, replicas: Sequence[str]) -> bool:
        if version != str(self.version):
            return False
        self.claims.append(tuple(replicas))
        for replica in replicas:
            self.entries.pop(replica, None)
        self.version += 1
        return True

    def write(self, replica: str, text: str | None) -> None:
        error, self.next_error = self.next_error, None
        _fail(error)
        if text is None:
            self.entries.pop(replica, None)
        else:
            self.entries[replica] = text
        self.version += 1
