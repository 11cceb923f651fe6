"""Each controller's declared RBAC (`RULES` in its kube.py) is exactly what it calls.

Every adapter method runs on a recording fake of the kubernetes client, through its error
paths too (a 404, a 409, a failed JSON-patch test), and every (group, resource, verb) it calls
must be in the rules its module declares. The other way round, every declared permission is
either called by an adapter or one kopf needs for the handlers the controller registers.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest

from radixfleet.kit.kube import KubeEvents
from radixfleet.kit.rbac import KOPF_TIMER, PolicyRule, covers
from radixfleet.kit.registry import plugins
from tests.kit.recording import Answer, Recorder, RecordingApiClient, obj

NOW = datetime(2026, 3, 1, tzinfo=UTC)
Scenario = Callable[[Any, Recorder], None]


def canary(api: Any, rec: Recorder) -> None:
    from radixfleet.controllers.canary.kube import (
        KubeBaselines,
        KubeCanaryPolicies,
        KubeInferenceServices,
    )

    isvcs, policies = KubeInferenceServices(api), KubeCanaryPolicies(api)
    isvcs.in_namespace("ns")
    rec.fail[("serving.kserve.io", "inferenceservices", "patch")] = [422]
    with pytest.raises(Exception, match="no longer"):
        isvcs.set_canary_percent("ns", "m", percent=10, canary_revision="r2")
    isvcs.set_canary_percent("ns", "m", percent=None, canary_revision="r2")
    rec.fail[("radixfleet.io", "canarypolicies/status", "update")] = [409]
    policies.write_rollout("ns", "p", {"inferenceService": "m", "phase": "Progressing"})
    policies.annotate("ns", "p", {"a": "b"})
    KubeEvents(api, clock=lambda: NOW, component="c").emit(
        involved=obj("m"), reason="R", message="m", warning=False
    )
    rec.answers[("", "pods", "list")] = Answer({"items": [_pod("s1", "r1"), _pod("s2", "r1"),
                                                          _pod("c1", "r2")]})  # fmt: skip
    baselines = KubeBaselines(api)
    rec.fail[("", "pods", "patch")] = [404]  # a pod gone since the list: skipped
    assert baselines.ensure("ns", "m", stable_revision="r1", canary_revision="r2") == 1
    baselines.release("ns", "m")


def _pod(name: str, revision: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"serving.knative.dev/revision": revision,
                                                  "radixfleet.io/pool": "serving"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def autoscale(api: Any, rec: Recorder) -> None:
    from radixfleet.controllers.autoscale.kube import (
        KubeAutoscalePolicies,
        KubeDataPlaneKeys,
        KubeInferenceServices,
        KubePods,
        KubeRevisions,
    )

    KubeInferenceServices(api).get("ns", "m")
    revisions = KubeRevisions(api)
    revisions.get("ns", "r")
    rec.fail[("autoscaling.internal.knative.dev", "podautoscalers", "patch")] = [404]
    revisions.set_scale("ns", "r", {"a": "1"})
    pods = KubePods(api)
    pods.of_revision("ns", "r")
    pods.set_deletion_cost("ns", "pod", 10)
    pods.set_pool("ns", "pod", "warming")
    rec.answers[("", "secrets", "get")] = Answer(data={"api-key": "ZHAta2V5"})
    assert KubeDataPlaneKeys(api).key("ns") == "dp-key"
    assert KubeDataPlaneKeys(api).key("ns", "api-key-2") is None
    policies = KubeAutoscalePolicies(api)
    rec.fail[("radixfleet.io", "autoscalepolicies/status", "update")] = [409]
    policies.write_status("ns", "p", {"desired": 1})
    KubeEvents(api, clock=lambda: NOW, component="c").emit(
        involved=obj("m"), reason="R", message="m", warning=False
    )


def quota(api: Any, rec: Recorder) -> None:
    from radixfleet.controllers.quota.kube import KubeResourceQuotas, KubeSecrets, KubeTenants
    from radixfleet.controllers.quota.spec import SecretKeyRef
    from radixfleet.kit.kube import KubeInferenceServices

    tenants = KubeTenants(api)
    tenants.list()
    rec.answers[("radixfleet.io", "tenants", "get")] = obj("t", None)
    tenants.write_status("t", {})
    KubeInferenceServices(api).everywhere()
    quotas = KubeResourceQuotas(api)
    rec.fail[("", "resourcequotas", "get")] = [404]
    quotas.set_hard("ns", tenant="t", gpus=1)  # absent: created
    quotas.set_hard("ns", tenant="t", gpus=2)  # present: patched
    rec.answers[("", "secrets", "get")] = Answer(data={"api-key": "c2stYQ=="})
    KubeSecrets(api).key(SecretKeyRef(name="k", namespace="ns"))


def failover(api: Any, rec: Recorder) -> None:
    from radixfleet.controllers.failover.kube import KubeFailoverPolicies, KubeFloors

    policies = KubeFailoverPolicies(api)
    policies.get("ns", "p")
    policies.write_status("ns", "p", {})
    floors = KubeFloors({"eu": api}, namespace="models")
    rec.fail[("", "configmaps", "get")] = [404, 404]
    floors.raise_floor("eu", "m", 2)  # no ConfigMap yet: created
    rec.answers[("", "configmaps", "get")] = Answer(data={"m": "2"})
    floors.raise_floor("eu", "m", 3)
    floors.release_floor("eu", "m")
    KubeEvents(api, clock=lambda: NOW, component="c").emit(
        involved=obj("p"), reason="R", message="m", warning=True
    )


def routers(api: Any, rec: Recorder) -> None:
    from radixfleet.controllers.routers.kube import KubeRevisions, KubeRouters
    from radixfleet.controllers.routers.spec import Router
    from radixfleet.kit.kube import KubeInferenceServices

    isvcs = KubeInferenceServices(api)
    isvcs.everywhere()
    isvcs.get("ns", "m")
    KubeRevisions(api).listed()
    found = KubeRouters(api)
    found.existing()
    found.apply(Router(namespace="ns", revision="m-predictor-00001", isvc="m"), image="smg@x")
    found.park(("ns", "m-predictor-00001-router"))
    found.ensure_key("ns")
    rec.fail[("", "secrets", "create")] = [409]
    found.ensure_key("ns")  # already there: kept


def lora(api: Any, rec: Recorder) -> None:
    from radixfleet.controllers.lora.kube import KubeLoraPods
    from radixfleet.kit.kube import KubeInferenceServices

    KubeInferenceServices(api).everywhere()
    rec.answers[("", "pods", "list")] = Answer({"items": [_pod("p1", "r1")]})  # no IP: not asked
    isvc = {"metadata": {"namespace": "ns", "name": "m", "labels": {"radixfleet.io/tenant": "t"}}}
    assert KubeLoraPods(api).replicas(isvc) == ()


SCENARIOS: dict[str, Scenario] = {
    "canary": canary,
    "autoscale": autoscale,
    "quota": quota,
    "failover": failover,
    "routers": routers,
    "lora": lora,
}


def _called(name: str) -> set[tuple[str, str, str]]:
    recorder = Recorder()
    SCENARIOS[name](RecordingApiClient(recorder), recorder)
    return set(recorder.calls)


def _kopf_watched(name: str) -> set[tuple[str, str]]:
    """(group, plural) of every resource the controller's kopf handlers serve."""
    plugin = next(p for p in plugins() if p.name == name)
    registry = kopf.OperatorRegistry()
    plugin.register(registry, object())
    handlers = [*registry._spawning.get_all_handlers(), *registry._watching.get_all_handlers()]
    selectors = [h.selector for h in handlers if h.selector is not None]
    return {(s.group or "", s.plural or s.any_name or "") for s in selectors}


def test_every_registered_controller_has_a_scenario() -> None:
    assert {p.name for p in plugins()} == set(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_call_an_adapter_makes_is_declared(name: str) -> None:
    declared: list[PolicyRule] = list(next(p for p in plugins() if p.name == name).rules())
    missing = sorted(t for t in _called(name) if not covers(declared, *t))
    assert not missing, f"{name} calls what its RULES do not allow: {missing}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_declared_permission_is_used(name: str) -> None:
    plugin = next(p for p in plugins() if p.name == name)
    called, watched = _called(name), _kopf_watched(name)
    unused = sorted(
        t
        for r in plugin.rules()
        for t in r.triples()
        if t not in called and not ((t[0], t[1]) in watched and t[2] in KOPF_TIMER)
    )
    assert not unused, f"{name} declares what nothing calls: {unused}"


def test_the_recorder_reads_paths_as_rbac_does() -> None:
    from tests.kit.recording import triple

    assert triple("GET", "/api/v1/namespaces/ns/pods", {}) == ("", "pods", "list")
    assert triple("GET", "/api/v1/namespaces", {"watch": True}) == ("", "namespaces", "watch")
    path = "/apis/radixfleet.io/v1alpha1/namespaces/ns/canarypolicies/p/status"
    assert triple("PUT", path, {}) == ("radixfleet.io", "canarypolicies/status", "update")
    assert triple("GET", "/apis/radixfleet.io/v1alpha1/tenants/t", {}) == (
        "radixfleet.io", "tenants", "get",
    )  # fmt: skip


def test_the_entrys_ledger_calls_exactly_what_its_rules_allow() -> None:
    """The quota's entry gate keeps its debts in one ConfigMap
    (radixfleet/controllers/quota/carry.py): get, patch, and a claim refused by a 409, nothing more
    (the ConfigMap is rendered, not made)."""
    from radixfleet.controllers.quota.kube import KubeLedgerStore

    recorder = Recorder()
    recorder.answers[("", "configmaps", "get")] = obj("radixfleet-entry-ledger", data={"a": "1"})
    store = KubeLedgerStore(RecordingApiClient(recorder))
    assert store.read().entries == {"a": "1"}
    store.write("me", "owed")
    recorder.fail[("", "configmaps", "patch")] = [409]
    assert not store.claim("1", ["a"])
    rules = KubeLedgerStore.RULES
    assert set(recorder.calls) == {t for r in rules for t in r.triples()}
