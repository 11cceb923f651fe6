"""deploy/monitoring/: the PodMonitors radixfleet renders, committed as rendered, and agreeing
with the operator's Deployment and the labels the canary queries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.controllers.routers.manifests import deployment as router_deployment
from radixfleet.controllers.routers.spec import Router
from radixfleet.render import entry, operator
from radixfleet.render.monitoring import (
    entries,
    operator_metrics,
    render_monitoring,
    routers,
    sanitized,
    sglang_predictors,
)
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


def test_the_base_builds_to_the_four_pod_monitors() -> None:
    names = {doc["metadata"]["name"] for doc in kustomize(BASE) if doc["kind"] == "PodMonitor"}
    assert names == {
        "radixfleet-sglang", "radixfleet-operator", "radixfleet-routers", "radixfleet-entry",
    }  # fmt: skip


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = deployment["spec"]["template"]
    return pod


ROUTER = Router("team-a", "chat-predictor-00001", "chat", "a", "uid")
MONITORED = [
    pytest.param(operator_metrics(), _pod(operator.deployment()), id="operator"),
    pytest.param(entries(), _pod(entry.deployment()), id="entry"),
    pytest.param(routers(), _pod(router_deployment(ROUTER, image="smg")), id="router"),
]


@pytest.mark.parametrize(("monitor", "pod"), MONITORED)
def test_each_monitor_selects_its_pods_and_names_a_port_they_declare(
    monitor: dict[str, Any], pod: dict[str, Any]
) -> None:
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert endpoint["port"] in {port["name"] for port in container["ports"]}


def test_router_series_carry_the_revision_model_and_tenant() -> None:
    (endpoint,) = routers()["spec"]["podMetricsEndpoints"]
    written = {rule["targetLabel"] for rule in endpoint["relabelings"]}
    assert written == {"revision", "model", "tenant"}
    pod_labels = _pod(router_deployment(ROUTER, image="smg"))["metadata"]["labels"]
    for rule in endpoint["relabelings"]:
        (source,) = rule["sourceLabels"]
        assert any(sanitized(label) == source.removeprefix("__meta_kubernetes_pod_label_")
                   for label in pod_labels)  # fmt: skip


def test_the_predictor_monitor_writes_the_labels_the_canary_queries() -> None:
    from radixfleet.controllers.canary.queries import QueryConfig

    (endpoint,) = sglang_predictors()["spec"]["podMetricsEndpoints"]
    written = {rule["targetLabel"] for rule in endpoint["relabelings"] if "targetLabel" in rule}
    assert QueryConfig().revision_label in written
    assert QueryConfig().pool_label in written  # a canary's baseline is told from its stable
