"""`radixfleet operator run`: every registered controller in one process, under kopf.

Every controller runs but the opt-in ones, each run only with `--with-NAME` (the failover: it
writes global Route 53 records, so one operator per fleet runs it, not one per region). The
command is composed from the plug-ins: each one's settings (`ControllerPlugin.settings`) are
options of it, after the kit's own, and reach that controller alone, parsed by its own code;
the kit knows none of them. Leader election is kopf peering (`radixfleet.kit.leader` says
why); `--standalone` turns it off for a single local replica. Imports only typer at the top,
and finds the plug-ins when the command line is built: `radixfleet --help` stays fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import typer

from radixfleet.kit.commands import (
    METRICS_PORT,
    NAMESPACES,
    PROMETHEUS,
    REGION,
    STANDALONE,
    Command,
    own_name,
    parsed,
)
from radixfleet.kit.settings import Setting

if TYPE_CHECKING:
    from radixfleet.kit.plugin import ControllerPlugin

LIVENESS_PORT = Setting("liveness_port", ("--liveness-port",), "kopf's GET /healthz.", int, 8080)
READINESS_PORT = Setting(
    "readiness_port", ("--readiness-port",), "GET /readyz: leader or standby.", int, 8081
)
VERBOSE = Setting("verbose", ("--verbose", "-v"), "kopf's info logs.", bool, default=False)

operator_app = typer.Typer(
    name="operator",
    help="Run every radixfleet controller in one operator (kopf, leader-elected).",
    no_args_is_help=True,
)


def opt_in_flag(plugin: ControllerPlugin) -> Setting:
    """`--with-NAME`, which runs an opt-in controller."""
    return Setting(f"with_{plugin.name}".replace("-", "_"), (f"--with-{plugin.name}",),
                   f"Also run the {plugin.name} (opt-in).", bool, default=False)  # fmt: skip


def operator_settings(found: Sequence[ControllerPlugin]) -> dict[str, Setting]:
    """The command's options by parameter: the kit's, then each plug-in's `--with-NAME` (if it
    is opt-in) and settings in registry order, then how the operator runs."""
    composed = {s.key: s for s in (REGION, PROMETHEUS, NAMESPACES)}
    for plugin in found:
        if plugin.opt_in:
            flag = opt_in_flag(plugin)
            composed[flag.key] = flag
        composed |= {own_name(plugin.name, s): s for s in plugin.settings}
    ports = (LIVENESS_PORT, READINESS_PORT, replace(METRICS_PORT, default=9464), VERBOSE)
    return composed | {s.key: s for s in (STANDALONE, *ports)}


def summary(found: Sequence[ControllerPlugin]) -> str:
    """The command's help: which controllers it runs, always and when asked."""
    always = [p.name for p in found if not p.opt_in]
    asked = " or ".join(p.name for p in found if p.opt_in)
    names = ", ".join(always[:-1]) + f" and {always[-1]}" if len(always) > 1 else "".join(always)
    return f"Run {names}{f' (and the {asked} if asked)' if asked else ''} until interrupted."


def run(values: dict[str, Any]) -> None:
    """Run the controllers chosen (every one not opt-in, and those asked for) until interrupted."""
    from radixfleet.kit.operator import Ports
    from radixfleet.kit.operator import run as run_operator
    from radixfleet.kit.plugin import OperatorOptions
    from radixfleet.kit.registry import selected

    found = _plugins()
    settings = {p.name: parsed(p.name, p.settings, values) for p in found}
    options = OperatorOptions(region=values["region"], prometheus_url=values["prometheus"],
                              settings=settings)  # fmt: skip
    chosen = selected(opt_in=[p.name for p in found if p.opt_in and values[opt_in_flag(p).key]])
    ports = Ports(liveness=values["liveness_port"], readiness=values["readiness_port"],
                  metrics=values["metrics_port"])  # fmt: skip
    typer.echo(f"radixfleet operator: {', '.join(p.name for p in chosen)}")
    run_operator(
        chosen, options=options, namespaces=values["namespaces"] or (),
        standalone=values["standalone"], ports=ports, verbose=values["verbose"],
    )  # fmt: skip


def _plugins() -> Sequence[ControllerPlugin]:
    from radixfleet.kit.registry import plugins

    return plugins()


operator_app.command("run")(
    Command(run, options=lambda: operator_settings(_plugins()), help=lambda: summary(_plugins()))
)
