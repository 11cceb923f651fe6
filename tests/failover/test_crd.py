"""The FailoverPolicy CRD on the test cluster's API server: defaults filled in, CEL rules, status
writes through the subresource."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from radixfleet.controllers.failover.controller import to_wire
from radixfleet.controllers.failover.decide import initial_status
from radixfleet.controllers.failover.kube import KubeFailoverPolicies
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from tests.failover.test_spec import MINIMAL

OURS = ("radixfleet.io", "v1alpha1")


def _create(api: client.CustomObjectsApi, ns: str, spec: dict[str, Any]) -> Any:
    body = {"apiVersion": "/".join(OURS), "kind": "FailoverPolicy",
            "metadata": {"name": "llama"}, "spec": spec}  # fmt: skip
    return api.create_namespaced_custom_object(*OURS, ns, "failoverpolicies", body)


def test_defaults_cel_and_status(kube_client: Any, namespace: str) -> None:
    api, ns = client.CustomObjectsApi(kube_client), namespace
    created = _create(api, ns, MINIMAL)
    # The server's defaults are the type's.
    assert FailoverPolicySpec.model_validate(created["spec"]) == FailoverPolicySpec.model_validate(
        MINIMAL
    )
    for bad in (
        {**MINIMAL, "regions": [{"name": "a", "weight": 0}, {"name": "b", "weight": 0}]},
        {**MINIMAL, "signals": {"ttftObjective": 1.0}},
        {**MINIMAL, "signals": {"ttftSloSeconds": 0}},
    ):
        with pytest.raises(ApiException) as refused:
            api.create_namespaced_custom_object(*OURS, ns, "failoverpolicies", {
                "apiVersion": "/".join(OURS), "kind": "FailoverPolicy",
                "metadata": {"name": f"bad-{uuid.uuid4().hex[:6]}"}, "spec": bad,
            })  # fmt: skip
        assert refused.value.status == 422
    spec = FailoverPolicySpec.model_validate(MINIMAL)
    status = initial_status(spec, datetime(2026, 3, 1, tzinfo=UTC))
    status = status.model_copy(update={"weights": {"us-east-1": 100, "eu-west-1": 0}})
    KubeFailoverPolicies(kube_client).write_status(ns, "llama", to_wire(status))
    stored: Any = api.get_namespaced_custom_object(*OURS, ns, "failoverpolicies", "llama")
    assert stored["status"]["weights"] == {"us-east-1": 100, "eu-west-1": 0}
    assert [r["phase"] for r in stored["status"]["regions"]] == ["Healthy", "Healthy"]
