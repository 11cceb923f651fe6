"""The same scenario and seed give the same results, whatever the number of worker processes."""

from __future__ import annotations

import json
from pathlib import Path

from radixfleet.twin.load import load_scenario
from radixfleet.twin.run import run_scenario, write_outcome


def _results(path: Path, out: Path, workers: int) -> str:
    outcome = run_scenario(load_scenario(path), workers=workers, oracles=False)
    return write_outcome(outcome, out).read_text()


def test_same_scenario_same_results_json(small_scenario: Path, tmp_path: Path) -> None:
    first = _results(small_scenario, tmp_path / "a", workers=1)
    again = _results(small_scenario, tmp_path / "b", workers=1)
    split = _results(small_scenario, tmp_path / "c", workers=2)
    assert first == again
    assert first == split
    metrics = json.loads(first)["metrics"]
    assert metrics["radixfleet"]["requests"] > 400
    # The outage and the crash show up: failed requests, a failover entry.
    assert metrics["baseline"]["failed"] > 0
    assert metrics["baseline"]["failover"][0]["region"] == "eu-west"


def test_another_seed_changes_the_results(small_scenario: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(small_scenario.read_text().replace("seed: 3", "seed: 4"))
    assert _results(small_scenario, tmp_path / "a", 1) != _results(other, tmp_path / "b", 1)
