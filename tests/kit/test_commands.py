"""The `run` commands the kit builds from plug-ins: what each hands the operator, run by a fake.

`radixfleet operator run` and each controller's `run` are composed from settings; these tests
hold that the options people and manifests pass (`--with-failover`, `--failover-context`,
`--router-image` or RADIXFLEET_ROUTER_IMAGE, ...) reach the controllers they are for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.controllers.failover.settings import CONTEXTS, FLOORS_NAMESPACE
from radixfleet.controllers.routers.settings import ROUTER_IMAGE
from radixfleet.kit import operator
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions


@dataclass
class Ran:
    """What `radixfleet.kit.operator.run` was called with, in place of running kopf."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, plugins: Sequence[ControllerPlugin], **kwargs: Any) -> None:
        self.calls.append({"names": [p.name for p in plugins], **kwargs})

    @property
    def options(self) -> OperatorOptions:
        found: OperatorOptions = self.calls[-1]["options"]
        return found


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Ran:
    fake = Ran()
    monkeypatch.setattr(operator, "run", fake)
    monkeypatch.delenv("RADIXFLEET_ROUTER_IMAGE", raising=False)
    return fake


def _invoke(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_operator_hands_each_controller_its_own_settings(ran: Ran) -> None:
    _invoke(
        "operator", "run", "--region", "eu", "-n", "a", "--with-failover",
        "--failover-context", "us=ctx-us", "--failover-context", "ap=ctx-ap",
        "--failover-namespace", "floors", "--router-image", "smg:1", "--standalone",
    )  # fmt: skip
    call = ran.calls[-1]
    assert call["names"] == ["canary", "autoscale", "quota", "failover", "routers"]
    assert call["namespaces"] == ["a"] and call["standalone"] is True
    assert (call["ports"].liveness, call["ports"].readiness, call["ports"].metrics) == (
        8080, 8081, 9464,
    )  # fmt: skip
    options = ran.options
    assert options.region == "eu" and options.prometheus_url is None
    assert options.setting("failover", CONTEXTS) == {"us": "ctx-us", "ap": "ctx-ap"}
    assert options.setting("failover", FLOORS_NAMESPACE) == "floors"
    assert options.setting("routers", ROUTER_IMAGE) == "smg:1"


def test_the_operator_without_options_runs_all_but_the_opt_in_on_defaults(ran: Ran) -> None:
    output = _invoke("operator", "run")
    assert ran.calls[-1]["names"] == ["canary", "autoscale", "quota", "routers"]
    assert "radixfleet operator: canary, autoscale, quota, routers" in output
    options = ran.options
    assert options.setting("failover", CONTEXTS) == {}
    assert options.setting("failover", FLOORS_NAMESPACE) == "default"
    assert options.setting("routers", ROUTER_IMAGE) is None


def test_the_router_image_comes_from_the_environment_too(ran: Ran) -> None:
    _invoke("operator", "run", env={"RADIXFLEET_ROUTER_IMAGE": "smg@sha256:ab"})
    assert ran.options.setting("routers", ROUTER_IMAGE) == "smg@sha256:ab"
    _invoke("routers", "run", env={"RADIXFLEET_ROUTER_IMAGE": "smg@sha256:cd"})
    assert ran.calls[-1]["names"] == ["routers"]
    assert ran.options.setting("routers", ROUTER_IMAGE) == "smg@sha256:cd"


def test_a_controller_run_alone_gets_its_settings_by_its_own_names(ran: Ran) -> None:
    _invoke("failover", "run", "--context", "us=c", "--floors-namespace", "f", "-n", "x")
    call = ran.calls[-1]
    assert call["names"] == ["failover"] and call["namespaces"] == ["x"]
    assert ran.options.setting("failover", CONTEXTS) == {"us": "c"}
    assert ran.options.setting("failover", FLOORS_NAMESPACE) == "f"
    assert call["ports"].liveness is None and call["ports"].metrics is None


@pytest.mark.parametrize(
    ("args", "region", "prometheus", "metrics"),
    [
        (["canary", "run", "--prometheus", "http://p"], "local", "http://p", None),
        (["autoscale", "run"], "local", None, 9464),
        (["quota", "run", "--region", "eu", "--metrics-port", "9"], "eu", None, 9),
    ],
    ids=["canary", "autoscale", "quota"],
)
def test_each_controllers_run_keeps_its_options_and_defaults(
    ran: Ran, args: list[str], region: str, prometheus: str | None, metrics: int | None
) -> None:
    _invoke(*args)
    call = ran.calls[-1]
    assert call["names"] == [args[0]] and call["ports"].metrics == metrics
    assert (ran.options.region, ran.options.prometheus_url) == (region, prometheus)


@pytest.mark.parametrize(
    ("args", "missing"),
    [(["quota", "run"], "--region"), (["routers", "run"], "--router-image")],
    ids=["quota", "routers"],
)
def test_what_a_controller_alone_requires_is_required(
    ran: Ran, args: list[str], missing: str
) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and missing in result.output and not ran.calls
