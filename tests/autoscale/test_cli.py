"""`radixfleet autoscale status` on a fake policy store: what it prints, and its exit codes."""

from __future__ import annotations

from datetime import UTC, datetime

from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.controllers.autoscale.fakes import FakeAutoscalePolicies
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    Demand,
    LastDecision,
    Verb,
    to_wire,
)

AT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _store(status: AutoscaleStatus | None) -> FakeAutoscalePolicies:
    store = FakeAutoscalePolicies()
    body = {"metadata": {"name": "llama", "namespace": "ns"}, "spec": {"inferenceService": "llama"}}
    store.add(body | ({"status": to_wire(status)} if status else {}))
    return store


def test_status_prints_the_decision_and_the_demand() -> None:
    recorded = AutoscaleStatus(
        inference_service="llama", revision="llama-00001", desired=5,
        demand=Demand(itl=4.6, kv=1.2, floor=1, ceiling=8),
        last_decision=LastDecision(action=Verb.SCALE_UP, reason="4 -> 5 (demand 4.60)", at=AT),
    )  # fmt: skip
    result = CliRunner().invoke(
        app, ["autoscale", "status", "llama", "-n", "ns"], obj=_store(recorded)
    )
    assert result.exit_code == 0, result.output
    assert "desired 5, bounds 1..8" in result.output
    assert "itl 4.60" in result.output
    assert "last decision scaleUp at 12:00:00: 4 -> 5" in result.output


def test_status_before_any_decision() -> None:
    result = CliRunner().invoke(app, ["autoscale", "status", "llama", "-n", "ns"], obj=_store(None))
    assert result.exit_code == 0
    assert "no decision yet" in result.output


def test_unknown_policy_exits_1() -> None:
    result = CliRunner().invoke(app, ["autoscale", "status", "nope", "-n", "ns"], obj=_store(None))
    assert result.exit_code == 1
    assert "not found" in result.output
