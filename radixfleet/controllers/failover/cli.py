"""`radixfleet failover status NAME [-n NS]` and `radixfleet failover run` (the controller).

NAME is the FailoverPolicy. `status` prints the weights, each region's phase and verdict, and
the last decision. `run` runs the failover alone; in a fleet it usually runs inside
`radixfleet operator run --with-failover`, in the one cluster that sees every region.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from radixfleet.controllers.failover.settings import ALONE
from radixfleet.kit.commands import NAMESPACES, Namespace, add_run, show_status
from radixfleet.kit.plugin import Deferred

if TYPE_CHECKING:
    from radixfleet.controllers.failover.state import FailoverStatus

failover_app = typer.Typer(
    name="failover",
    help="Watch and run the regional failover (FailoverPolicy: Route 53 weights).",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="The FailoverPolicy.")]
KUBE_POLICIES = Deferred("radixfleet.controllers.failover.kube:KubeFailoverPolicies")


@failover_app.command()
def status(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Show a policy's weights, each region's phase, and the last decision."""
    from radixfleet.controllers.failover.controller import status_of

    show_status(ctx, kind="FailoverPolicy", store=KUBE_POLICIES, namespace=namespace, name=name,
                status_of=status_of, describe=describe)  # fmt: skip


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
