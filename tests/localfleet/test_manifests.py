"""The demo's manifest step reports a catalog it cannot read instead of failing the demo."""

from __future__ import annotations

from pathlib import Path

from radixfleet.demo.manifests import render_and_check


def test_a_missing_catalog_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    check = render_and_check(tmp_path / "missing.yaml", tmp_path / "rendered")
    assert not check.ok and "missing.yaml" in check.problems[0]
    assert check.files == 0
