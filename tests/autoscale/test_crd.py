"""The AutoscalePolicy CRD on the test cluster's API server: its defaults are the type's, and its
CEL rule refuses bounds the wrong way round. A tick on a real Knative revision is in
tests/cluster/test_autoscale.py."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec

OURS = ("radixfleet.io", "v1alpha1", "autoscalepolicies")


@pytest.fixture
def api(kube_client: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


def _policy(api: client.CustomObjectsApi, ns: str, spec: dict[str, Any]) -> Any:
    body = {"apiVersion": "radixfleet.io/v1alpha1", "kind": "AutoscalePolicy",
            "metadata": {"name": "llama"}, "spec": spec}  # fmt: skip
    return api.create_namespaced_custom_object(*OURS[:2], ns, OURS[2], body)


def test_crd_defaults_fill_in_and_match_the_type(
    api: client.CustomObjectsApi, namespace: str
) -> None:
    created = _policy(api, namespace, {"inferenceService": "llama"})
    assert AutoscalePolicySpec.model_validate(created["spec"]) == AutoscalePolicySpec(
        inference_service="llama"
    )
    assert created["spec"]["scaleDown"]["stabilizationSeconds"] == 300


def test_crd_refuses_min_above_max(api: client.CustomObjectsApi, namespace: str) -> None:
    with pytest.raises(ApiException) as refused:
        _policy(api, namespace, {"inferenceService": "llama", "minReplicas": 5, "maxReplicas": 2})
    assert refused.value.status == 422
    assert "minReplicas must not be above maxReplicas" in str(refused.value.body)
