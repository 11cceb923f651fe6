"""The Tenant CRD and the quota controller against a real Kubernetes API server (tests/apiserver).

The schema's types, bounds and CEL rules reject bad budgets before they exist; the controller
writes a status the schema accepts through the status subresource, reading real Tenants and
InferenceServices. ResourceQuotas and Secrets are core objects this server does not serve, so
they go to fakes here (their adapters are tested over HTTP against kmock in test_controller).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from policies.quota.controller import Controller
from policies.quota.fakes import FakeResourceQuotas, FakeSecrets
from policies.quota.kube import KubeInferenceServices, KubeTenants
from policies.quota.state import ConditionType, TenantStatus

pytestmark = pytest.mark.apiserver

OURS = ("radixfleet.io", "v1alpha1", "tenants")
KSERVE = ("serving.kserve.io", "v1beta1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def api(kube_client: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


def create(api: client.CustomObjectsApi, spec: dict[str, Any], name: str | None = None) -> Any:
    body = {
        "apiVersion": "radixfleet.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name or f"t-{uuid.uuid4().hex[:8]}"},
        "spec": spec,
    }
    return api.create_cluster_custom_object(*OURS, body)


def rejected(api: client.CustomObjectsApi, spec: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as raised:
        create(api, spec)
    assert raised.value.status == 422
    return str(raised.value.body)


def test_defaults_fill_in(api: client.CustomObjectsApi) -> None:
    made = create(api, {"namespaces": ["team-x"], "gpuBudget": {"H100": {"guaranteed": 4}}})
    assert made["spec"]["priority"] == 100
    assert made["spec"]["gpuBudget"]["H100"] == {"guaranteed": 4, "borrow": 0}
    assert create(api, {"namespaces": ["team-y"]})["spec"]["gpuBudget"] == {}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        pytest.param(
            {"namespaces": ["a"], "gpuBudget": {"H100": {"guaranteed": -1}}},
            "should be greater than or equal to 0",
            id="negative",
        ),
        pytest.param(
            {"namespaces": ["a"], "gpuBudget": {"H100": {"guaranteed": "eight"}}},
            "must be of type integer",
            id="non-numeric",
        ),
        pytest.param(
            {"namespaces": ["a"], "gpuBudget": {"B300": {"guaranteed": 1}}},
            "unknown GPU type",
            id="unknown-gpu",
        ),
        pytest.param(
            {"namespaces": ["a"], "tokenBudget": {"tokensPerMinute": 0}},
            "should be greater than or equal to 1",
            id="zero-tokens",
        ),
        pytest.param(
            {"namespaces": ["a"], "tokenBudget": {"tokensPerMinute": 10, "perModel": {"m": 20}}},
            "cannot exceed the tenant's tokensPerMinute",
            id="model-above-tenant",
        ),
        pytest.param({"namespaces": []}, "should have at least 1 items", id="no-namespaces"),
        pytest.param({"namespaces": ["Team_A"]}, "should match", id="bad-namespace"),
        pytest.param(
            {"namespaces": ["a"], "apiKeys": [{"name": "k"}]},
            "namespace: Required",
            id="key-without-namespace",
        ),
        pytest.param(
            {"namespaces": ["a"], "priority": 5000}, "less than or equal to 1000", id="priority"
        ),
    ],
)
def test_the_schema_rejects_bad_budgets(
    api: client.CustomObjectsApi, spec: dict, says: str
) -> None:
    assert says in rejected(api, spec)


def test_the_controller_writes_a_status_the_schema_accepts(api: client.CustomObjectsApi) -> None:
    ns = f"q-{uuid.uuid4().hex[:8]}"
    name = create(
        api,
        {
            "namespaces": [ns],
            "gpuBudget": {"H100": {"guaranteed": 8, "borrow": 4}},
            "apiKeys": [{"name": "gone", "namespace": "keys"}],
        },
    )["metadata"]["name"]
    isvc = {
        "apiVersion": "/".join(KSERVE),
        "kind": "InferenceService",
        "metadata": {
            "name": "llama",
            "annotations": {
                "radixfleet.io/gpu-type": "H100",
                "radixfleet.io/gpus-per-replica": "2",
            },
        },
        "spec": {
            "predictor": {
                "minReplicas": 0,
                "maxReplicas": 3,
                "model": {
                    "modelFormat": {"name": "sglang"},
                    "runtime": "sglang",
                    "storageUri": "s3://m/l",
                },
            }
        },
    }
    api.create_namespaced_custom_object(*KSERVE, ns, "inferenceservices", isvc)
    quotas = FakeResourceQuotas()
    fleet = Controller(
        tenants=KubeTenants(api.api_client),
        isvcs=KubeInferenceServices(api.api_client),
        quotas=quotas,
        secrets=FakeSecrets(),
    )
    fleet.reconcile(now=T0)
    stored = api.get_cluster_custom_object(*OURS, name)
    status = TenantStatus.from_wire(stored["status"])
    assert status is not None and status.commitments[f"{ns}/llama"].gpus == 6
    assert stored["status"]["gpus"]["H100"]["ceiling"] >= 8
    keys = status.condition(ConditionType.API_KEYS_RESOLVED)
    assert keys is not None and (keys.status, keys.reason) == ("False", "SecretMissing")
    assert (ns, name, stored["status"]["gpus"]["H100"]["ceiling"]) in quotas.calls
    # The spec stays the user's: a status write never touches it.
    assert stored["spec"]["gpuBudget"]["H100"] == {"guaranteed": 8, "borrow": 4}
