"""`radixfleet failover status NAME [-n NS]` and `radixfleet failover run` (the controller).

NAME is the FailoverPolicy. `status` prints the weights, each region's phase and verdict, and
the last decision. `run` runs the failover alone; in a fleet it usually runs inside
`radixfleet operator run --with-failover`, in the one cluster that sees every region.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console

from radixfleet.controllers.failover.settings import ALONE
from radixfleet.kit.commands import NAMESPACES, add_run

if TYPE_CHECKING:
    from radixfleet.controllers.failover.ports import FailoverPolicies
    from radixfleet.controllers.failover.state import FailoverStatus

failover_app = typer.Typer(
    name="failover",
    help="Watch and run the regional failover (FailoverPolicy: Route 53 weights).",
    no_args_is_help=True,
)
console = Console()
err = Console(stderr=True)
EXIT_NOT_FOUND = 1

Name = Annotated[str, typer.Argument(help="The FailoverPolicy.")]
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="Its namespace.")]


@failover_app.command()
def status(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Show a policy's weights, each region's phase, and the last decision."""
    from radixfleet.controllers.failover.controller import status_of
    from radixfleet.kit.errors import KubeError

    policies: FailoverPolicies = ctx.obj or _kube_policies()
    try:
        policy = policies.get(namespace, name)
    except KubeError as error:
        _fail(str(error))
    if policy is None:
        _fail(f"FailoverPolicy {namespace}/{name} not found")
    recorded = status_of(policy)
    if recorded is None:
        console.print(f"{namespace}/{name}: no decision yet")
        return
    for line in describe(recorded):
        console.print(line, highlight=False, soft_wrap=True)


add_run(
    failover_app, "radixfleet.controllers.failover.plugin:PLUGIN", own=ALONE, shared=[NAMESPACES],
    help="Run the failover controller (kopf) until interrupted.",
)  # fmt: skip


def describe(recorded: FailoverStatus) -> list[str]:
    """The status in a few lines, as `failover status` prints them."""
    weights = ", ".join(f"{r} {w}" for r, w in sorted(recorded.weights.items())) or "-"
    lines = [f"weights: {weights}; healthy regions {recorded.healthy_regions}"]
    for region in recorded.regions:
        verdict = f", {region.verdict}" if region.verdict else ""
        floors = f", floors {dict(region.raised_floors)}" if region.raised_floors else ""
        lines.append(f"{region.name}: {region.phase}{verdict}{floors} {region.reason}".rstrip())
    if recorded.last_decision is not None:
        last = recorded.last_decision
        moved = " (weights shifted)" if last.shifted else ""
        lines.append(f"last decision at {last.at:%H:%M:%S}{moved}: {last.reason}")
    return lines


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_NOT_FOUND)


def _kube_policies() -> FailoverPolicies:
    from radixfleet.controllers.failover.kube import KubeFailoverPolicies
    from radixfleet.kit.kube import api_client

    return KubeFailoverPolicies(api_client())
