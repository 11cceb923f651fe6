"""`radixfleet canary ...` on fakes: what each command writes, and what status prints."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.cli import app
from radixfleet.controllers.canary.cli import Ports
from radixfleet.controllers.canary.fakes import FakeCanaryPolicies, FakeInferenceServices
from radixfleet.controllers.canary.state import Phase
from tests.canary.test_controller import CANARY, GOOD, NAME, NS, POLICY, Fleet, answers

runner = CliRunner()


def _invoke(fleet: Fleet, *args: str) -> tuple[int, str]:
    ports = Ports(isvcs=fleet.isvcs, policies=fleet.policies)
    result = runner.invoke(app, ["canary", *args, NAME, "-n", NS], obj=ports)
    return result.exit_code, result.output


def _annotations(policies: FakeCanaryPolicies) -> dict[str, str]:
    return dict(policies.items[(NS, POLICY)]["metadata"].get("annotations", {}))


@pytest.mark.parametrize(
    ("command", "key", "value"),
    [
        ("pause", f"pause.canary.radixfleet.io/{NAME}", "true"),
        ("promote", f"promote.canary.radixfleet.io/{NAME}", CANARY),
        ("abort", f"abort.canary.radixfleet.io/{NAME}", CANARY),
    ],
    ids=["pause", "promote", "abort"],
)
def test_commands_annotate_the_policy_for_this_canary(command: str, key: str, value: str) -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    code, output = _invoke(fleet, command)
    assert code == 0, output
    assert _annotations(fleet.policies) == {key: value}
    assert fleet.isvcs.items[(NS, NAME)]["metadata"]["annotations"].keys() == {
        "radixfleet.io/canary-policy"
    }  # the InferenceService is never annotated: that would start a new Knative revision


def test_abort_then_the_controller_rolls_back() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.tick()
    assert _invoke(fleet, "abort")[0] == 0
    fleet.tick()
    assert fleet.percents == [5, 0]


def test_resume_lifts_the_pause_and_approves_a_waiting_gate() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)), spec={"manualGates": [20]})
    _invoke(fleet, "pause")
    fleet.tick(3)
    assert fleet.rollout().phase is Phase.PAUSED
    code, output = _invoke(fleet, "resume")
    assert code == 0 and f"pause.canary.radixfleet.io/{NAME}" not in _annotations(fleet.policies)
    fleet.tick(7)  # to 5%, then an analysis that passes and waits at the gate before 20%
    assert fleet.rollout().phase is Phase.AWAITING_APPROVAL
    code, output = _invoke(fleet, "resume")
    assert f"{CANARY}@20 approved" in output
    fleet.tick()
    assert fleet.percents == [5, 20]


def test_status_prints_phase_reason_and_checks() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD | {"ttftP95": 0.4})))
    fleet.tick(7)
    fleet.now += timedelta(seconds=1)
    code, output = _invoke(fleet, "status")
    assert code == 0, output
    assert "Progressing at 5%" in output
    assert "failed analyses 1 of 2" in output
    assert "ttftP95" in output and "FAIL" in output


def test_status_of_an_unknown_service_fails() -> None:
    fleet = Fleet(FakePrometheus())
    ports = Ports(isvcs=FakeInferenceServices(), policies=fleet.policies)
    result = runner.invoke(app, ["canary", "status", "nope", "-n", NS], obj=ports)
    assert result.exit_code == 1
    assert "not found" in result.output


def test_promote_without_a_canary_fails() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    predictor = fleet.isvcs.items[(NS, NAME)]["status"]["components"]["predictor"]
    predictor["latestRolledoutRevision"] = CANARY
    code, output = _invoke(fleet, "promote")
    assert code == 1 and "no revision being rolled out" in output


def test_importing_the_cli_loads_no_client_library_or_spec_models() -> None:
    # `radixfleet --help` imports radixfleet.controllers.canary.cli; these cost seconds and belong
    # to the commands.
    heavy = [
        "kubernetes",
        "kopf",
        "requests",
        "pydantic",
        "radixfleet.controllers.canary.spec",
        "radixfleet.controllers.canary.observe",
    ]
    module = "radixfleet.controllers.canary.cli"
    probe = f"import sys, {module}; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_without_a_cluster_help_works_and_commands_say_why_they_cannot_run(
    tmp_path: Path,
) -> None:
    """`--help` needs no cluster; a command that does says so in one line and exits 2, with no
    traceback (before, the group built a Kubernetes client for every invocation)."""
    env = {"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    cli = [str(Path(sys.executable).parent / "radixfleet"), "canary"]
    helped = subprocess.run([*cli, "run", "--help"], env=env, capture_output=True, text=True)
    assert helped.returncode == 0 and "Run the canary controller" in helped.stdout
    status = subprocess.run([*cli, "status", "llama"], env=env, capture_output=True, text=True)
    assert status.returncode == 2
    assert "no Kubernetes configuration" in status.stderr
    assert "Traceback" not in status.stderr + status.stdout
