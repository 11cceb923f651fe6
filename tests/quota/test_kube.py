"""The Tenant CRD and the quota controller on the test cluster's API server (with KServe's CRDs).

The schema's types, bounds and CEL rules reject bad budgets before they exist; the controller
writes a status the schema accepts through the status subresource, reading real Tenants and
InferenceServices, and sets the tenant's real ResourceQuota.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from radixfleet.controllers.quota.controller import Controller
from radixfleet.controllers.quota.kube import (
    KubeLedgerStore,
    KubeResourceQuotas,
    KubeSecrets,
    KubeTenants,
)
from radixfleet.controllers.quota.observe import api_keys
from radixfleet.controllers.quota.spec import SecretKeyRef
from radixfleet.controllers.quota.state import ConditionType, TenantStatus
from radixfleet.kit.kube import KubeInferenceServices
from radixfleet.platform import ENTRY_LEDGER
from tests.quota.test_controller import tenant

OURS = ("radixfleet.io", "v1alpha1", "tenants")
KSERVE = ("serving.kserve.io", "v1beta1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# Tenants are cluster-wide: the ones made here carry this label and go at the end of each test.
LABEL = "radixfleet.io/test=quota-crd"


@pytest.fixture
def api(kube_client: Any) -> Iterator[client.CustomObjectsApi]:
    api = client.CustomObjectsApi(kube_client)
    yield api
    api.delete_collection_cluster_custom_object(*OURS, label_selector=LABEL)


def create(api: client.CustomObjectsApi, spec: dict[str, Any], name: str | None = None) -> Any:
    body = {
        "apiVersion": "radixfleet.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {
            "name": name or f"t-{uuid.uuid4().hex[:8]}",
            "labels": dict([LABEL.split("=")]),
        },
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
        pytest.param(
            {"namespaces": ["a"], "apiKeys": [{"name": "k", "namespace": "b"}]},
            "must be in one of the tenant's namespaces",
            id="key-outside-the-tenants-namespaces",
        ),
        pytest.param(
            {
                "namespaces": ["a"],
                "apiKeys": [{"name": "k", "namespace": "a", "expiresAt": "next tuesday"}],
            },
            "date-time",
            id="key-expiry-not-a-time",
        ),
    ],
)
def test_the_schema_rejects_bad_budgets(
    api: client.CustomObjectsApi, spec: dict, says: str
) -> None:
    assert says in rejected(api, spec)


def test_the_controller_writes_a_status_the_schema_accepts(
    kserve: Any, api: client.CustomObjectsApi, namespace: str
) -> None:
    # The InferenceService first: once a Tenant claims the namespace, the quota's admission
    # policy (if a test installed it) would hold new ones back until the tenant is accounted.
    api.create_namespaced_custom_object(*KSERVE, namespace, "inferenceservices", ISVC)
    name = create(
        api,
        {
            "namespaces": [namespace],
            "gpuBudget": {"H100": {"guaranteed": 8, "borrow": 4}},
            "apiKeys": [{"name": "gone", "namespace": namespace}],
        },
    )["metadata"]["name"]
    fleet = Controller(
        tenants=KubeTenants(api.api_client),
        isvcs=KubeInferenceServices(api.api_client),
        quotas=KubeResourceQuotas(api.api_client),
        secrets=KubeSecrets(api.api_client),
    )
    fleet.reconcile(now=T0)
    stored = api.get_cluster_custom_object(*OURS, name)
    status = TenantStatus.from_wire(stored["status"])
    assert status is not None and status.commitments[f"{namespace}/llama"].gpus == 6
    ceiling = stored["status"]["gpus"]["H100"]["ceiling"]
    assert ceiling >= 8
    keys = status.condition(ConditionType.API_KEYS_RESOLVED)
    assert keys is not None and (keys.status, keys.reason) == ("False", "SecretMissing")
    quota = KubeResourceQuotas(api.api_client).get(namespace)
    assert quota is not None and quota["spec"]["hard"] == {"requests.nvidia.com/gpu": str(ceiling)}
    # The spec stays the user's: a status write never touches it.
    assert stored["spec"]["gpuBudget"]["H100"] == {"guaranteed": 8, "borrow": 4}


# Standard mode and no runtime of that name: KServe accepts it and deploys nothing.
ISVC = {
    "apiVersion": "/".join(KSERVE),
    "kind": "InferenceService",
    "metadata": {
        "name": "llama",
        "annotations": {
            "radixfleet.io/gpu-type": "H100",
            "radixfleet.io/gpus-per-replica": "2",
            "serving.kserve.io/deploymentMode": "Standard",
        },
    },
    "spec": {
        "predictor": {
            "minReplicas": 0,
            "maxReplicas": 3,
            "model": {
                "modelFormat": {"name": "sglang"},
                "runtime": "not-installed",
                "storageUri": "s3://m/l",
            },
        }
    },
}


def test_resource_quotas_and_secrets(kube_client: Any, namespace: str) -> None:
    quotas, secrets = KubeResourceQuotas(kube_client), KubeSecrets(kube_client)
    assert quotas.get(namespace) is None
    quotas.set_hard(namespace, tenant="a", gpus=8)
    quotas.set_hard(namespace, tenant="a", gpus=4)
    quota = quotas.get(namespace)
    assert quota is not None and quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
    assert quota["metadata"]["labels"]["radixfleet.io/tenant"] == "a"
    encoded = base64.b64encode(b"sk-a\n").decode()
    secret = {"metadata": {"name": "a", "namespace": namespace}, "data": {"api-key": encoded}}
    client.CoreV1Api(kube_client).create_namespaced_secret(namespace, secret)
    assert secrets.key(SecretKeyRef(name="a", namespace=namespace)) == "sk-a"
    assert secrets.key(SecretKeyRef(name="a", namespace=namespace, key="other")) is None
    assert secrets.key(SecretKeyRef(name="gone", namespace=namespace)) is None
    spec = {"namespaces": ["a"], "apiKeys": [{"name": "a", "namespace": namespace}]}
    assert api_keys([tenant("a", spec)], secrets).tenants == {"sk-a": "a"}


def test_the_entry_ledger_on_a_real_configmap(kube_client: Any, namespace: str) -> None:
    """Each replica's key patched alone, removed with null; a claim from a resourceVersion that
    moved on is refused (the API server's 409), one from the current one removes the keys. The
    ConfigMap is rendered without data (radixfleet/render/entry.py), as created here."""
    meta = {"name": ENTRY_LEDGER, "namespace": namespace}
    client.CoreV1Api(kube_client).create_namespaced_config_map(namespace, {"metadata": meta})
    store = KubeLedgerStore(kube_client, namespace=namespace)
    assert store.read().entries == {}
    store.write("entry-1", "one")
    store.write("entry-2", "two")
    seen = store.read()
    assert seen.entries == {"entry-1": "one", "entry-2": "two"}
    store.write("entry-2", "two, later")
    assert not store.claim(seen.version, ["entry-1"]), "claimed from a version gone by"
    assert store.read().entries == {"entry-1": "one", "entry-2": "two, later"}
    assert store.claim(store.read().version, ["entry-1"])
    store.write("entry-2", None)
    assert store.read().entries == {}
