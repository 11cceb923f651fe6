"""The test helper that declares KIngresses ready: the status a Route reads, written once."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

from testbed import session
from testbed.fake_kingress import mark_all_ready, ready_status

NOW = "2026-11-23T12:00:00Z"


def kingress(*splits: tuple[str, int], generation: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "namespace": "models", "generation": generation},
        "spec": {
            "rules": [
                {
                    "hosts": ["llama.models.svc.cluster.local"],
                    "visibility": "ClusterLocal",
                    "http": {
                        "paths": [
                            {
                                "splits": [
                                    {
                                        "serviceName": name,
                                        "serviceNamespace": "models",
                                        "percent": p,
                                    }
                                    for name, p in splits
                                ]
                            }
                        ]
                    },
                }
            ]
        },
    }


class FakeKIngresses:
    """Records the status patches it is sent, and keeps them as the objects' new status."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def list_all(self) -> list[dict[str, Any]]:
        return self.objects

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patches.append((namespace, name, status))
        for obj in self.objects:
            if obj["metadata"]["name"] == name and obj["metadata"]["namespace"] == namespace:
                obj["status"] = status


def test_ready_status_points_the_route_at_the_revision_with_most_traffic() -> None:
    status = ready_status(kingress(("llama-00001", 10), ("llama-00002", 90)), now=NOW)
    assert status is not None
    assert status["observedGeneration"] == 2
    assert {c["type"] for c in status["conditions"] if c["status"] == "True"} >= {"Ready"}
    expected = [{"domainInternal": "llama-00002.models.svc.cluster.local"}]
    assert status["privateLoadBalancer"]["ingress"] == expected


def test_marks_each_kingress_once_and_again_after_it_changes() -> None:
    api = FakeKIngresses(kingress(("llama-00001", 100)))
    assert mark_all_ready(api, now=NOW) == ["models/llama"]
    assert mark_all_ready(api, now=NOW) == []
    api.objects[0]["metadata"]["generation"] = 3
    assert mark_all_ready(api, now=NOW) == ["models/llama"]
    assert len(api.patches) == 2


def test_a_kingress_without_splits_still_gets_an_address() -> None:
    status = ready_status(kingress(), now=NOW)
    assert status is not None
    domain = status["publicLoadBalancer"]["ingress"][0]["domainInternal"]
    assert domain == "llama.models.svc.cluster.local"


class HangingKubectl:
    """A cluster whose kubectl never answers (an API server going down): each call lasts its
    whole timeout, then raises as `subprocess.run` does. Records every call's timeout."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def kubectl(self, *args: str, check: bool = True, timeout_s: float | None = None) -> Any:
        self.timeouts.append(timeout_s)
        time.sleep(0.05)  # standing for the whole timeout, which this test does not wait out
        raise subprocess.TimeoutExpired(["kubectl", *args], timeout_s or 0.0)


def test_the_marking_thread_ends_with_its_block_even_when_kubectl_hangs() -> None:
    hanging = HangingKubectl()
    # The cluster tests' session fixture may run a marking thread of its own beside this one.
    before = _marking_threads()
    with session.kingresses_marked_ready(hanging, every_s=0.01):  # type: ignore[arg-type]
        time.sleep(0.2)
    calls = len(hanging.timeouts)
    assert calls >= 1
    assert all(t == session.KubectlKIngresses.CALL_TIMEOUT_S for t in hanging.timeouts)
    assert _marking_threads() == before
    time.sleep(0.1)
    assert len(hanging.timeouts) == calls, "no call once the block has ended"


def _marking_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "fake-kingress"}
