"""`radixfleet failover status` on a fake policy store: what it prints, and its exit codes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.controllers.failover.controller import to_wire
from radixfleet.controllers.failover.fakes import FakeFailoverPolicies
from radixfleet.controllers.failover.settings import parse_contexts
from radixfleet.controllers.failover.state import FailoverStatus, LastDecision, Phase, RegionStatus

AT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _store(status: FailoverStatus | None) -> FakeFailoverPolicies:
    body = {"metadata": {"name": "global", "namespace": "ns"}, "spec": {}}
    store = FakeFailoverPolicies()
    store.items[("ns", "global")] = body | ({"status": to_wire(status)} if status else {})
    return store


def test_status_prints_weights_regions_and_the_last_decision() -> None:
    recorded = FailoverStatus(
        regions=(
            RegionStatus(name="us", phase=Phase.HEALTHY),
            RegionStatus(name="eu", phase=Phase.UNHEALTHY, reason="availability 12%",
                         raised_floors={"llama": 4}),
        ),
        weights={"us": 100, "eu": 0}, healthy_regions=1,
        last_decision=LastDecision(reason="eu evacuated", at=AT, shifted=True),
    )  # fmt: skip
    result = CliRunner().invoke(
        app, ["failover", "status", "global", "-n", "ns"], obj=_store(recorded)
    )
    assert result.exit_code == 0, result.output
    assert "weights: eu 0, us 100; healthy regions 1" in result.output
    assert "floors {'llama': 4} availability 12%" in result.output
    assert "last decision at 12:00:00 (weights shifted): eu evacuated" in result.output


def test_status_before_any_decision() -> None:
    result = CliRunner().invoke(app, ["failover", "status", "global", "-n", "ns"], obj=_store(None))
    assert result.exit_code == 0
    assert "no decision yet" in result.output


def test_unknown_policy_exits_1() -> None:
    result = CliRunner().invoke(app, ["failover", "status", "nope", "-n", "ns"], obj=_store(None))
    assert result.exit_code == 1
    assert "not found" in result.output


@pytest.mark.parametrize("bad", ["eu", "=ctx", "eu="], ids=["no-equals", "no-region", "no-context"])
@pytest.mark.parametrize(
    "command",
    [
        ["failover", "run", "--context"],
        ["operator", "run", "--with-failover", "--failover-context"],
    ],
    ids=["failover-run", "operator-run"],
)
def test_a_malformed_context_is_a_usage_error(bad: str, command: list[str]) -> None:
    assert parse_contexts(["us=a", "eu=b"]) == {"us": "a", "eu": "b"}
    with pytest.raises(ValueError):
        parse_contexts([bad])
    result = CliRunner().invoke(app, [*command, bad])  # refused before anything runs
    assert result.exit_code == 2 and "is not REGION=CONTEXT" in result.output, result.output


def test_every_controller_and_the_operator_have_commands() -> None:
    for command in ("canary", "autoscale", "quota", "failover", "operator"):
        result = CliRunner().invoke(app, [command, "--help"])
        assert result.exit_code == 0, (command, result.output)
    assert "--with-failover" in CliRunner().invoke(app, ["operator", "run", "--help"]).output
