"""The canary against a real Kubernetes API server (tests/apiserver) with the KServe CRDs.

The CanaryPolicy CRD's CEL rules and defaults, the self-checking JSON patch on an
InferenceService, status writes through the subresource, and a whole rollout driven by the
controller on real objects. KServe itself does not run: tests write the predictor status it
would write. Events are core objects this server does not serve, so they go to a fake.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from canary.controller import Controller
from canary.fakes import FakeEvents
from canary.kube import KubeCanaryPolicies, KubeInferenceServices
from canary.ports import StaleRevisionError
from canary.spec import POLICY_ANNOTATION
from canary.state import Phase, rollout_of
from radixfleet.adapters.prometheus_fake import FakePrometheus
from tests.canary.test_controller import CANARY, GOOD, STABLE, answers

pytestmark = pytest.mark.apiserver

KSERVE = ("serving.kserve.io", "v1beta1")
OURS = ("radixfleet.io", "v1alpha1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def ns() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def api(kube_client: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


def _create_policy(api: client.CustomObjectsApi, ns: str, spec: dict[str, Any]) -> Any:
    body = {"apiVersion": "/".join(OURS), "kind": "CanaryPolicy",
            "metadata": {"name": "default"}, "spec": spec}  # fmt: skip
    return api.create_namespaced_custom_object(*OURS, ns, "canarypolicies", body)


def _create_isvc(api: client.CustomObjectsApi, ns: str) -> None:
    body = {
        "apiVersion": "/".join(KSERVE), "kind": "InferenceService",
        "metadata": {"name": "llama", "annotations": {POLICY_ANNOTATION: "default"}},
        "spec": {"predictor": {"minReplicas": 0, "canaryTrafficPercent": 0, "model": {
            "modelFormat": {"name": "sglang"}, "runtime": "sglang", "storageUri": "s3://m/llama"}}},
    }  # fmt: skip
    api.create_namespaced_custom_object(*KSERVE, ns, "inferenceservices", body)
    _kserve_status(api, ns, created=CANARY, rolled_out=STABLE)


def _kserve_status(api: client.CustomObjectsApi, ns: str, *, created: str, rolled_out: str) -> None:
    """Write the predictor status KServe would report, through the status subresource."""
    predictor = {"latestCreatedRevision": created, "latestReadyRevision": created,
                 "latestRolledoutRevision": rolled_out}  # fmt: skip
    patch = {"status": {"components": {"predictor": predictor}}}
    api.patch_namespaced_custom_object_status(*KSERVE, ns, "inferenceservices", "llama", patch)


def _isvc(api: client.CustomObjectsApi, ns: str) -> Any:
    return api.get_namespaced_custom_object(*KSERVE, ns, "inferenceservices", "llama")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"steps": [20, 5]}, "steps must be strictly increasing"),
        ({"steps": [100]}, "at least one step must be below 100"),
        ({"steps": [5, 50], "manualGates": [20]}, "every manual gate must be one of the steps"),
        ({"checks": [{"metric": "ttftP95"}]}, "set relativeToStable, limit or both"),
        ({"checks": [{"metric": "errorRate", "limit": 2}]}, "the limit of a rate is a fraction"),
        ({"intervalSeconds": 5}, "should be greater than or equal to 10"),
    ],
    ids=["unsorted", "only-100", "stray-gate", "check-without-limit", "rate-over-1", "interval"],
)
def test_the_crd_refuses_bad_policies(
    api: client.CustomObjectsApi, ns: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        _create_policy(api, ns, spec)
    assert refused.value.status == 422
    assert message in json.loads(refused.value.body)["message"]


def test_the_api_server_fills_the_types_defaults(api: client.CustomObjectsApi, ns: str) -> None:
    from canary.spec import CanaryPolicySpec

    created = _create_policy(api, ns, {})
    assert CanaryPolicySpec.model_validate(created["spec"]) == CanaryPolicySpec()


def test_traffic_patch_checks_the_canary_in_the_same_request(
    kube_client: Any, api: client.CustomObjectsApi, ns: str
) -> None:
    _create_isvc(api, ns)
    isvcs = KubeInferenceServices(kube_client)
    isvcs.set_canary_percent(ns, "llama", percent=20, canary_revision=CANARY)
    assert _isvc(api, ns)["spec"]["predictor"]["canaryTrafficPercent"] == 20
    with pytest.raises(StaleRevisionError):
        isvcs.set_canary_percent(ns, "llama", percent=50, canary_revision="llama-predictor-00009")
    assert _isvc(api, ns)["spec"]["predictor"]["canaryTrafficPercent"] == 20
    isvcs.set_canary_percent(ns, "llama", percent=None, canary_revision=CANARY)
    assert "canaryTrafficPercent" not in _isvc(api, ns)["spec"]["predictor"]


def test_rollouts_of_two_services_share_the_policy_status(
    kube_client: Any, api: client.CustomObjectsApi, ns: str
) -> None:
    _create_policy(api, ns, {})
    policies = KubeCanaryPolicies(kube_client)
    for name, phase in (("a", "Progressing"), ("b", "RolledBack"), ("a", "Halted")):
        rollout = {"inferenceService": name, "canaryRevision": "r2", "phase": phase, "weight": 5}
        policies.write_rollout(ns, "default", rollout)
    status = api.get_namespaced_custom_object(*OURS, ns, "canarypolicies", "default")["status"]
    assert [(r["inferenceService"], r["phase"]) for r in status["rollouts"]] == [
        ("a", "Halted"), ("b", "RolledBack"),
    ]  # fmt: skip
    assert status["activeRollouts"] == 1
    policies.annotate(ns, "default", {"pause.canary.radixfleet.io/a": "true"})
    policies.annotate(ns, "default", {"pause.canary.radixfleet.io/a": None})
    policy = policies.get(ns, "default")
    assert policy is not None
    assert "pause.canary.radixfleet.io/a" not in (policy["metadata"].get("annotations") or {})


def test_a_whole_rollout_on_real_objects(
    kube_client: Any, api: client.CustomObjectsApi, ns: str
) -> None:
    _create_policy(api, ns, {"steps": [10, 50]})
    _create_isvc(api, ns)
    events = FakeEvents()
    controller = Controller(
        KubeInferenceServices(kube_client),
        KubeCanaryPolicies(kube_client),
        events,
        FakePrometheus(answers(GOOD, namespace=ns)),
    )
    seen = []
    for tick in range(20):
        policy = api.get_namespaced_custom_object(*OURS, ns, "canarypolicies", "default")
        controller.reconcile_policy(policy, now=T0 + timedelta(seconds=10 * tick))
        predictor = _isvc(api, ns)["spec"]["predictor"]
        seen.append(predictor.get("canaryTrafficPercent"))
        if "canaryTrafficPercent" not in predictor:
            break
    assert [p for i, p in enumerate(seen) if i == 0 or p != seen[i - 1]] == [10, 50, None]
    policy = api.get_namespaced_custom_object(*OURS, ns, "canarypolicies", "default")
    rollout = rollout_of(policy, "llama")
    assert rollout is not None and rollout.phase is Phase.PROMOTED
    assert [e.reason for e in events.calls][-1] == "CanaryPromote"
