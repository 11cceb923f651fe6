"""`radixfleet routers status` and `radixfleet routers run`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

routers_app = typer.Typer(
    name="routers",
    help="The smg router of every serving revision (radixfleet/controllers/routers).",
    no_args_is_help=True,
)
console = Console()


@routers_app.command()
def status() -> None:
    """List the routers in the current cluster: namespace, name, model, replicas, image."""
    from radixfleet.controllers.routers.kube import KubeRouters
    from radixfleet.kit.kube import api_client

    table = Table("namespace", "router", "model", "replicas", "image")
    for (namespace, name), found in sorted(KubeRouters(api_client()).existing().items()):
        table.add_row(namespace, name, found.isvc, str(found.replicas), found.image)
    console.print(table)


@routers_app.command()
def run(
    router_image: Annotated[
        str, typer.Option(envvar="RADIXFLEET_ROUTER_IMAGE", help="The smg image routers run.")
    ],
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    standalone: Annotated[bool, typer.Option(help="No leader election (one replica).")] = False,
) -> None:
    """Run the routers controller against the current cluster until interrupted."""
    from radixfleet.controllers.routers.plugin import PLUGIN
    from radixfleet.kit.operator import Ports, run_alone

    run_alone(PLUGIN, standalone=standalone, router_image=router_image,
              ports=Ports(liveness=None, readiness=None, metrics=metrics_port))  # fmt: skip
