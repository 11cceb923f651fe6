"""`radixfleet routers status` and `radixfleet routers run`."""

from __future__ import annotations

import typer
from rich.table import Table

from radixfleet.controllers.routers.settings import ALONE
from radixfleet.kit.commands import add_run, console

routers_app = typer.Typer(
    name="routers",
    help="The smg router of every serving revision (radixfleet/controllers/routers).",
    no_args_is_help=True,
)


@routers_app.command()
def status() -> None:
    """List the routers in the current cluster: namespace, name, model, replicas, image."""
    from radixfleet.controllers.routers.kube import KubeRouters
    from radixfleet.kit.kube import api_client

    table = Table("namespace", "router", "model", "replicas", "image")
    for (namespace, name), found in sorted(KubeRouters(api_client()).existing().items()):
        table.add_row(namespace, name, found.isvc, str(found.replicas), found.image)
    console.print(table)


add_run(
    routers_app, "radixfleet.controllers.routers.plugin:PLUGIN", own=ALONE,
    help="Run the routers controller against the current cluster until interrupted.",
)  # fmt: skip
