"""`radixfleet twin run` and `radixfleet bench`: what they write."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.twin.load import parse_scenario
from tests.twin.conftest import SMALL


def test_twin_run_writes_results_plots_and_report(small_scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["twin", "run", "--scenario", str(small_scenario), "--out", str(out), "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert set(results["metrics"]) == {"radixfleet", "baseline"}
    assert set(results["ratios"]["radixfleet"]) >= {"vs_baseline", "gpu_hours_vs_oracle"}
    for name in ("headline.png", "replicas.png", "ttft_p95.png", "timing.json"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.html").read_text()
    assert "data:image/png;base64," in report and "radixfleet" in report


def test_twin_run_refuses_a_missing_trace(small_scenario: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "twin",
            "run",
            "--scenario",
            str(small_scenario),
            "--out",
            str(tmp_path / "o"),
            "--trace",
            str(tmp_path / "nope.csv"),
        ],
    )
    assert result.exit_code == 2
    assert "no such trace file" in result.output


def test_bench_quick_runs_every_scenario_of_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    data = yaml.safe_load(SMALL)
    data["duration_s"] = 40
    data["faults"] = [
        {"kind": "replica_crash", "at_s": 20, "region": "us-east", "model": "llama-8b"}
    ]
    for name in ("one", "two"):
        data["name"] = name
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    parse_scenario((folder / "one.yaml").read_text(), source="one.yaml")
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--quick",
            "--out",
            str(out),
            "--scenarios",
            str(folder),
            "--workers",
            "1",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    bench = json.loads((out / "bench.json").read_text())
    assert set(bench["scenarios"]) == {"one", "two"}
    assert "vs_baseline" in bench["headline"]["one"]["radixfleet"]
    assert (out / "report.html").exists() and (out / "one" / "results.json").exists()
