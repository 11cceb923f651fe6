"""The region entry's kustomize base (deploy/entry/): rendered as committed, HA, least
privilege, and a sound pod whose budget share matches its replica count."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.platform import MONITORING_NAMESPACE
from radixfleet.render.entry import METRICS_PORT, PORT, render_entry
from tests.test_render_operator import kustomize, of_kind, triples

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "deploy" / "entry"
CATALOG = REPO / "inferenceservices" / "catalog.yaml"


def test_committed_base_is_what_render_produces(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "--catalog", str(CATALOG), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    fresh = {p.name: p.read_text() for p in (tmp_path / "deploy" / "entry").glob("*.yaml")}
    committed = {p.name: p.read_text() for p in BASE.glob("*.yaml")}
    assert fresh == render_entry()
    assert committed == fresh, "deploy/entry/ drifted: run `radixfleet render`"


def test_the_entry_is_ha_and_holds_its_share_of_each_budget() -> None:
    docs = kustomize(BASE)
    deployment = of_kind(docs, "Deployment")
    replicas = deployment["spec"]["replicas"]
    assert replicas >= 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--replicas") + 1] == str(replicas)
    budget = of_kind(docs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert (
        of_kind(docs, "Service")["spec"]["selector"]
        == deployment["spec"]["selector"]["matchLabels"]
    )


def test_the_entry_pod_is_unprivileged_and_probed() -> None:
    pod = of_kind(kustomize(BASE), "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_the_entry_may_only_read_models_tenants_and_rollouts_cluster_wide() -> None:
    role = of_kind(kustomize(BASE), "ClusterRole")
    assert triples(role["rules"]) == {
        ("serving.kserve.io", "inferenceservices", "list"),
        ("radixfleet.io", "tenants", "list"),
        ("radixfleet.io", "canarypolicies", "list"),  # which rollouts run a baseline
    }  # its Secrets: by name, in tenant namespaces (tests/test_tenant_access.py)


def test_any_client_reaches_the_entrys_port_and_only_prometheus_its_metrics() -> None:
    """The front door: its HTTP port open to every source (a load balancer, an Ingress, another
    region's failover; the entry authenticates each request itself), its metrics, which name
    every tenant's models and token counts, to Prometheus's namespace only."""
    docs = kustomize(BASE)
    (policy,) = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"]
    assert policy["podSelector"] == of_kind(docs, "Deployment")["spec"]["selector"]
    prometheus = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": MONITORING_NAMESPACE}}}  # fmt: skip
    assert policy["ingress"] == [
        {"ports": [{"port": PORT}]},
        {"from": [prometheus], "ports": [{"port": METRICS_PORT}]},
    ]
