"""The generated dashboards and rules: committed copies up to date, valid Grafana JSON, sane layout.

Validity is checked two ways: the SDK's typed models must read every dashboard back unchanged
(the schema types Grafana's own tooling generates them from), and structural rules Grafana
relies on hold (a uid, unique panel ids, panels on the 24-column grid, every query with a
datasource and an expression).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from radixfleet import metrics_names as m
from radixfleet.config.catalog import Catalog
from radixfleet.dashboards import render_dashboards, rules, sli
from radixfleet.dashboards.render import DASHBOARDS, all_dashboards
from tests.dashboards.conftest import REPO

COMMITTED = REPO / "dashboards"


def test_committed_files_are_what_the_generator_writes(tmp_path: Path, catalog: Catalog) -> None:
    written = render_dashboards(tmp_path, catalog=catalog)
    stale = [
        str(p.relative_to(tmp_path))
        for p in written
        if not (COMMITTED / p.relative_to(tmp_path)).is_file()
        or (COMMITTED / p.relative_to(tmp_path)).read_text() != p.read_text()
    ]
    assert not stale, f"run `radixfleet render` and commit: {stale} differ from dashboards/"


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_dashboard_reads_back_through_the_sdk_types(name: str) -> None:
    register_default_plugins()  # panel and query types resolve to their typed models
    data = json.loads((COMMITTED / f"{name}.json").read_text())
    typed = Dashboard.from_json(data)
    assert json.loads(json.dumps(typed.to_json(), default=_to_json)) == data


def _to_json(obj: Any) -> Any:
    return obj.to_json()


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_dashboard_structure(name: str) -> None:
    board = all_dashboards()[name]
    assert board["uid"].startswith("radixfleet-") and board["title"]
    panels = board["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat") and panel["description"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert target["expr"].strip() and target["refId"]
    _assert_no_overlap(panels)


def _assert_no_overlap(panels: list[dict[str, Any]]) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_every_variable_a_query_uses_is_defined() -> None:
    for board in all_dashboards().values():
        defined = {v["name"] for v in board["templating"]["list"]}
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                used = {w.strip("${}") for w in target["expr"].split('"') if w.startswith("$")}
                assert used <= defined, (board["uid"], panel["title"], used - defined)


def test_prometheus_rule_object_matches_the_plain_rule_file(catalog: Catalog) -> None:
    cr = yaml.safe_load((COMMITTED / "rules" / "radixfleet-rules.yaml").read_text())
    plain = yaml.safe_load((COMMITTED / "rules" / "radixfleet.rules.yaml").read_text())
    assert cr["apiVersion"] == "monitoring.coreos.com/v1" and cr["kind"] == "PrometheusRule"
    assert cr["spec"] == plain == rules.rule_file(catalog)


def test_every_alert_has_a_promtool_case() -> None:
    tests = yaml.safe_load(
        (COMMITTED / "rules" / "tests" / "radixfleet-rules.test.yaml").read_text()
    )
    cases: dict[str, list[bool]] = {}
    for test in tests["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], []).append(bool(case["exp_alerts"]))
    for alert in rules.alerts.all_alerts():
        assert {True, False} <= set(cases.get(alert.alert, [])), f"{alert.alert}: fire and resolve"


def test_slo_targets_follow_the_catalog(catalog: Catalog) -> None:
    targets = {
        r.labels[m.MODEL_NAME]: (r.expr, r.labels[m.LE])
        for r in sli.slo_target_rules(catalog)
        if r.record == sli.SLO_TTFT_TARGET
    }
    # 500 ms is counted under the 0.4 s bucket: a request between the two is never called good.
    assert targets["llama-3-1-8b"] == ("vector(0.5)", "0.4")
    assert targets["llama-3-1-70b"] == ("vector(1.5)", "1.0")


def test_an_slo_under_the_smallest_bucket_is_refused() -> None:
    with pytest.raises(ValueError, match="smallest bucket"):
        m.bucket_at_or_under(0.05, m.SGLANG_TTFT_BUCKETS)


def test_kustomize_builds_dashboards_and_rules() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(COMMITTED)], capture_output=True, text=True, check=True
    ).stdout
    docs = list(yaml.safe_load_all(out))
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    assert {d["kind"] for d in docs} == {"ConfigMap", "PrometheusRule"}
    assert len(maps) == len(DASHBOARDS)
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        (board,) = cm["data"].values()
        assert json.loads(board)["uid"].startswith("radixfleet-")


def test_promtool_checks_the_rules() -> None:
    promtool = _promtool()
    subprocess.run(
        [promtool, "check", "rules", str(COMMITTED / "rules" / "radixfleet.rules.yaml")],
        check=True,
        capture_output=True,
    )


def test_promtool_unit_tests_fire_and_resolve_every_alert() -> None:
    done = subprocess.run(
        [_promtool(), "test", "rules", "radixfleet-rules.test.yaml"],
        cwd=COMMITTED / "rules" / "tests",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/provision.sh installs prometheus)")
    return promtool
