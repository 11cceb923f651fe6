"""The CanaryPolicy CRD on the test cluster's API server: its CEL rules and defaults, and the
rollouts of two InferenceServices kept side by side in one policy's status. The self-checking
traffic patch and whole rollouts on a real KServe are in tests/cluster/test_canary.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from radixfleet.controllers.canary.spec import POLICY_ANNOTATION
from tests.canary.test_controller import CANARY, STABLE

KSERVE = ("serving.kserve.io", "v1beta1")
OURS = ("radixfleet.io", "v1alpha1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def ns(namespace: str) -> str:
    return namespace


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
    from radixfleet.controllers.canary.spec import CanaryPolicySpec

    created = _create_policy(api, ns, {})
    assert CanaryPolicySpec.model_validate(created["spec"]) == CanaryPolicySpec()
