"""deploy/monitoring/: the PodMonitors radixfleet renders, committed as rendered, and agreeing
with the operator's Deployment and the labels the canary queries."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.render import operator
from radixfleet.render.monitoring import operator_metrics, render_monitoring, sglang_predictors
from tests.test_render_operator import kustomize

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "deploy" / "monitoring"
CATALOG = REPO / "inferenceservices" / "catalog.yaml"


def test_committed_base_is_what_render_produces(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "--catalog", str(CATALOG), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    fresh = {p.name: p.read_text() for p in (tmp_path / "deploy" / "monitoring").glob("*.yaml")}
    committed = {p.name: p.read_text() for p in BASE.glob("*.yaml")}
    assert fresh == render_monitoring()
    assert committed == fresh, "deploy/monitoring/ drifted: run `radixfleet render`"


def test_the_base_builds_to_the_two_pod_monitors() -> None:
    names = {doc["metadata"]["name"] for doc in kustomize(BASE) if doc["kind"] == "PodMonitor"}
    assert names == {"radixfleet-sglang", "radixfleet-operator"}


def test_the_operator_monitor_names_a_port_the_operator_declares() -> None:
    (endpoint,) = operator_metrics()["spec"]["podMetricsEndpoints"]
    (container,) = operator.deployment()["spec"]["template"]["spec"]["containers"]
    assert endpoint["port"] in {port["name"] for port in container["ports"]}


def test_the_predictor_monitor_writes_the_labels_the_canary_queries() -> None:
    from canary.queries import QueryConfig

    (endpoint,) = sglang_predictors()["spec"]["podMetricsEndpoints"]
    written = {rule["targetLabel"] for rule in endpoint["relabelings"] if "targetLabel" in rule}
    assert QueryConfig().revision_label in written
