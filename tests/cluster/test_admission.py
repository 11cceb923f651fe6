"""What the real API server enforces: the quota's ValidatingAdmissionPolicy evaluated by
kube-apiserver's CEL admission, and RBAC on a ServiceAccount's token.

These need only the API server of the test cluster, not the kubelet; they run on it because it
is the one place where admission and authorization are the production code paths.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from radixfleet.config.catalog import GpuBudget
from radixfleet.controllers.quota import admission, quota_writes
from radixfleet.controllers.quota.decide import accounts
from radixfleet.controllers.quota.kube import quota_manifest
from radixfleet.controllers.quota.spec import QUOTA_NAME
from radixfleet.controllers.quota.state import TenantStatus
from testbed import session
from testbed.cluster import Cluster
from testbed.deploy import PLATFORM_FIELD_MANAGER

NAMESPACE = "team-vap"


def _isvc(name: str, *, max_replicas: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {
                "radixfleet.io/gpu-type": "H100",
                "radixfleet.io/gpus-per-replica": str(gpus),
            },
        },
        "spec": {
            "predictor": {
                "minReplicas": 0,
                "maxReplicas": max_replicas,
                "model": {
                    "modelFormat": {"name": "sglang"},
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(gpus)},
                        "requests": {"nvidia.com/gpu": str(gpus)},
                    },
                },
            }
        },
    }


@pytest.fixture(scope="module")
def budgeted_tenant(kserve: Cluster) -> str:
    """The policy and its binding, and a Tenant with 4 H100s accounted to it, on the cluster
    with KServe's own CRDs (and webhooks) installed."""
    cluster = kserve
    cluster.kubectl("create", "namespace", NAMESPACE)
    # As the operator's base installs them (deploy/operator/), by the field manager the test
    # bed's overlays apply with: the policy's `matchConstraints` is an atomic field the API
    # server fills in defaults of, so a second manager's apply of it would conflict.
    session.apply(cluster, admission.manifests(), field_manager=PLATFORM_FIELD_MANAGER)
    tenant = {
        "apiVersion": "radixfleet.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": "vap"},
        "spec": {"namespaces": [NAMESPACE], "gpuBudget": {"H100": {"guaranteed": 4}}},
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(tenant))
    # The status the quota controller would write: the same accounting code computes it.
    budget = {"H100": GpuBudget(guaranteed=4, borrow=0)}
    accounted = accounts({"vap": budget}, {"vap": {"H100": 0}})["vap"]
    status = {"status": TenantStatus(namespaces=[NAMESPACE], gpus=accounted).to_wire()}
    cluster.kubectl(
        "patch", "tenant", "vap", "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    # The API server compiles a new policy and its binding in the background: wait until a
    # server-side dry run of an over-budget InferenceService is refused, or the tests race it.
    session.wait_for(
        lambda: _refused_by_policy(cluster, _isvc("probe", max_replicas=3, gpus=2)),
        timeout_s=120,
        what="the quota's admission policy in force",
    )
    return "vap"


def _refused_by_policy(cluster: Cluster, isvc: dict[str, Any]) -> bool:
    tried = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", check=False, stdin=json.dumps(isvc)
    )
    return tried.returncode != 0 and "inferenceservice-gpu-budget" in tried.stderr


def test_an_over_budget_inferenceservice_is_refused_with_the_quota_message(
    cluster: Cluster, budgeted_tenant: str
) -> None:
    refused = cluster.kubectl(
        "create", "-f", "-", check=False, stdin=json.dumps(_isvc("too-big", max_replicas=3, gpus=2))
    )
    assert refused.returncode != 0
    assert "ValidatingAdmissionPolicy 'inferenceservice-gpu-budget.radixfleet.io'" in refused.stderr
    assert "H100 budget exceeded" in refused.stderr
    assert f"{NAMESPACE}/too-big asks for 6 GPUs" in refused.stderr


def test_an_in_budget_inferenceservice_is_admitted(cluster: Cluster, budgeted_tenant: str) -> None:
    admitted = cluster.kubectl(
        "create", "-f", "-", check=False, stdin=json.dumps(_isvc("fits", max_replicas=2, gpus=2))
    )
    assert admitted.returncode == 0, admitted.stderr
    cluster.kubectl("delete", "inferenceservice", "fits", "-n", NAMESPACE, "--wait=false")


def _operators_quota(
    cluster: Cluster, namespace: str, name: str
) -> subprocess.CompletedProcess[str]:
    """A server-side dry run of the operator's account creating ResourceQuota `name`, labelled
    as radixfleet's, in `namespace`; in group system:masters, so RBAC lets it through and only
    the admission policy can refuse it."""
    quota = quota_manifest(namespace, tenant="vap", gpus=0)
    quota["metadata"]["name"] = name
    return cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", f"--as={quota_writes.OPERATOR}",
        "--as-group=system:masters", check=False, stdin=json.dumps(quota),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("namespace", "name", "admitted"),
    [
        pytest.param(NAMESPACE, QUOTA_NAME, True, id="its-own-in-a-tenants-namespace"),
        pytest.param("kube-system", QUOTA_NAME, False, id="kube-system"),
        pytest.param("default", QUOTA_NAME, False, id="a-platform-namespace"),
        pytest.param(NAMESPACE, "compute", False, id="another-quota"),
    ],
)
def test_the_operator_writes_only_its_own_resourcequota_and_only_in_tenant_namespaces(
    cluster: Cluster, budgeted_tenant: str, namespace: str, name: str, admitted: bool
) -> None:
    # Before, a leaked operator token could cap kube-system at no pods: the ClusterRole's
    # ResourceQuota verbs reach every namespace, as a Tenant may name any of its own.
    def in_force() -> bool:
        return _operators_quota(cluster, "kube-system", QUOTA_NAME).returncode != 0

    session.wait_for(in_force, timeout_s=120, what="the operator's ResourceQuota policy in force")
    tried = _operators_quota(cluster, namespace, name)
    assert (tried.returncode == 0) is admitted, tried.stderr
    if not admitted:
        assert quota_writes.POLICY_NAME in tried.stderr


def test_rbac_refuses_a_service_account_what_its_role_does_not_grant(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.kubectl("create", "namespace", "rbac-probe")
    cluster.kubectl("create", "serviceaccount", "reader", "-n", "rbac-probe")
    cluster.kubectl(
        "create", "role", "pod-reader", "-n", "rbac-probe", "--verb=get,list", "--resource=pods"
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "reader",
        "-n",
        "rbac-probe",
        "--role=pod-reader",
        "--serviceaccount=rbac-probe:reader",
    )
    token = cluster.kubectl("create", "token", "reader", "-n", "rbac-probe").stdout.strip()
    as_reader = cluster.token_kubeconfig(token, tmp_path / "reader.kubeconfig")
    allowed = cluster.kubectl("get", "pods", "-n", "rbac-probe", kubeconfig=as_reader, check=False)
    refused = cluster.kubectl(
        "get", "secrets", "-n", "rbac-probe", kubeconfig=as_reader, check=False
    )
    assert allowed.returncode == 0, allowed.stderr
    assert refused.returncode != 0
    assert 'cannot list resource "secrets"' in refused.stderr
