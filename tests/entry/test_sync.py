"""The entry's sync loop: it builds the routes from what the gate and the API server say, and
keeps going (on the last table) when a read fails, whatever the failure."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from radixfleet.dataplane.prefixes import HotPrefixes
from radixfleet.entry.kube import (
    RULES,
    KubeCanaryPolicies,
    KubeDataPlaneKeys,
    keep_in_sync,
)
from radixfleet.entry.server import ClusterEntry
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import KubeInferenceServices
from radixfleet.kit.rbac import covers
from tests.kit.recording import Recorder, RecordingApiClient

ISVC = {"metadata": {"name": "chat", "namespace": "team-a"},
        "status": {"components": {"predictor": {"traffic": [
            {"revisionName": "chat-predictor-00001", "percent": 100}]}}}}  # fmt: skip


class FlakyGate:
    """Fails its first reads with `errors`, then names one tenant's namespace."""

    def __init__(self, errors: Sequence[BaseException]) -> None:
        self.errors = list(errors)
        self.calls = 0

    def install(self, app: web.Application) -> None: ...

    def tenant_of(self, request: web.Request) -> str | None:
        return None

    def registry(self) -> CollectorRegistry:
        return CollectorRegistry()

    async def keep(self) -> None: ...

    def sync(self) -> Mapping[str, Sequence[str]]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"a": ["team-a"]}


class Listed:
    def everywhere(self) -> list[dict[str, Any]]:
        return [ISVC]


class Keys:
    """The data-plane key of team-a only."""

    def keys(self, namespace: str) -> dict[str, str]:
        return {"api-key": "k"} if namespace == "team-a" else {}


def synced(entry: ClusterEntry, policies: Any = None) -> ClusterEntry:
    """`entry` once its sync loop has built the routes (the loop then stops)."""

    async def go() -> ClusterEntry:
        task = asyncio.create_task(
            keep_in_sync(entry, Listed(), Keys(), interval_s=0.01, policies=policies)
        )
        while entry.routes is None:
            await asyncio.sleep(0.01)
        task.cancel()
        return entry

    return asyncio.run(asyncio.wait_for(go(), timeout=30))


@pytest.mark.parametrize(
    "error",
    [pytest.param(KubeError("list tenants: HTTP 503", status=503), id="api-error"),
     pytest.param(ConnectionRefusedError("no API server"), id="no-answer")],
)  # fmt: skip
def test_a_failed_read_is_retried_and_the_routes_come(error: BaseException) -> None:
    gate = FlakyGate([error, error])
    entry = synced(ClusterEntry(gate=gate, session=None))  # type: ignore[arg-type]
    route = entry.routes.resolve("a", "chat") if entry.routes else None
    assert route is not None and route.targets[0].revision == "chat-predictor-00001"
    assert gate.calls >= 3
    assert entry.keys == {"team-a": {"api-key": "k"}}


class KeysReadBeforeRoutes(Keys):
    """Team-a's key, remembering whether the entry already routed when it was read."""

    def __init__(self, entry: ClusterEntry) -> None:
        self.entry = entry
        self.routed_at_read: list[bool] = []

    def keys(self, namespace: str) -> dict[str, str]:
        self.routed_at_read.append(self.entry.routes is not None)
        return super().keys(namespace)


def test_a_new_tenants_route_comes_with_its_key() -> None:
    entry = ClusterEntry(gate=FlakyGate([]), session=None)  # type: ignore[arg-type]
    keys = KeysReadBeforeRoutes(entry)

    async def first_sync() -> None:
        task = asyncio.create_task(keep_in_sync(entry, Listed(), keys, interval_s=0.01))
        while entry.routes is None:
            await asyncio.sleep(0)
        task.cancel()

    asyncio.run(asyncio.wait_for(first_sync(), timeout=30))
    assert entry.keys == {"team-a": {"api-key": "k"}}
    assert keys.routed_at_read[0] is False


def test_which_key_a_revision_took_is_forgotten_once_no_route_leads_to_it() -> None:
    entry = ClusterEntry(gate=FlakyGate([]), session=None)  # type: ignore[arg-type]
    entry.revision_keys = {("team-a", "chat-predictor-00001"): "api-key-2",
                           ("team-a", "chat-predictor-00000"): "api-key"}  # fmt: skip
    synced(entry)
    assert entry.revision_keys == {("team-a", "chat-predictor-00001"): "api-key-2"}


def test_the_prompts_of_a_model_no_route_leads_to_are_forgotten() -> None:
    prefixes = HotPrefixes(keys_of=lambda _ns: ["k"])
    body = {"prompt": "You are a helpful assistant. " * 20}
    for namespace, model in (("team-a", "chat"), ("team-a", "deleted"), ("team-b", "chat")):
        prefixes.record(namespace, model, body)

    synced(ClusterEntry(gate=FlakyGate([]), session=None, prefixes=prefixes))  # type: ignore[arg-type]
    assert set(prefixes.models) == {("team-a", "chat")}


class Rollouts:
    """A CanaryPolicy of team-a whose rollout of chat runs a baseline with a ready pod."""

    def everywhere(self) -> list[dict[str, Any]]:
        rollout = {"inferenceService": "chat", "phase": "Progressing",
                   "baseline": {"revision": "chat-predictor-00001", "ready": 1}}  # fmt: skip
        return [{"metadata": {"namespace": "team-a"}, "status": {"rollouts": [rollout]}}]


def test_the_routes_know_which_rollouts_run_a_baseline() -> None:
    entry = synced(ClusterEntry(gate=FlakyGate([]), session=None), Rollouts())  # type: ignore[arg-type]
    route = entry.routes.resolve("a", "chat") if entry.routes else None
    assert route is not None and route.baseline == "chat-predictor-00001"


def test_the_entrys_cluster_reads_are_its_declared_rules() -> None:
    """Every call of the entry's adapters is in `RULES`, and every rule is called (on the kit's
    recording client)."""
    recorder = Recorder()
    api = RecordingApiClient(recorder)
    KubeInferenceServices(api).everywhere()
    KubeCanaryPolicies(api).everywhere()
    KubeDataPlaneKeys(api).keys("team-a")
    called = set(recorder.calls)
    assert called == {t for r in RULES for t in r.triples()}
    assert all(covers(list(RULES), *t) for t in called)
