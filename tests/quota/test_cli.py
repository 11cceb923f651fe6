"""`radixfleet quota admission-policy` prints what is committed; `run` is registered."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.controllers.quota import admission

REPO = Path(__file__).resolve().parents[2]


def test_admission_policy_prints_the_committed_manifests() -> None:
    result = CliRunner().invoke(app, ["quota", "admission-policy"])
    assert result.exit_code == 0, result.output
    assert result.output == (REPO / admission.MANIFEST_PATH).read_text()
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.output)]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2


def test_run_is_a_command() -> None:
    result = CliRunner().invoke(app, ["quota", "run", "--help"])
    assert result.exit_code == 0 and "--region" in result.output
