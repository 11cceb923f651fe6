"""`radixfleet entry run`: the region entry in a cluster, until interrupted.

Imports only typer at the top: `radixfleet --help` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from radixfleet.platform import PROMETHEUS_URL, UPSTREAM_CONNECTIONS

entry_app = typer.Typer(
    name="entry",
    help="The region entry: tenants' API keys and token budgets in front of the models.",
    no_args_is_help=True,
)


@entry_app.command()
def run(
    port: Annotated[int, typer.Option(help="Where clients (the load balancer) connect.")] = 8000,
    replicas: Annotated[
        int, typer.Option(min=1, help="Entry replicas sharing each budget (the Deployment's).")
    ] = 1,
    region: Annotated[str, typer.Option(help="The region label of exported metrics.")] = "local",
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics.")] = 9464,
    sync_seconds: Annotated[float, typer.Option(help="How often the cluster is re-read.")] = 2.0,
    cluster_domain: Annotated[str, typer.Option(help="The cluster's DNS domain.")] = (
        "cluster.local"
    ),
    prometheus_url: Annotated[
        str,
        typer.Option(
            envvar="RADIXFLEET_PROMETHEUS_URL",
            help="The region's Prometheus, relayed to the fleet's failover under /fleet/v1/"
            "prometheus when $RADIXFLEET_FLEET_TOKEN is set.",
        ),
    ] = PROMETHEUS_URL,
    upstream_connections: Annotated[
        int,
        typer.Option(
            min=1,
            help="Connections to the routers, in all; each tenant with a key holds at most an "
            "equal share of them, so none can stall the others.",
        ),
    ] = UPSTREAM_CONNECTIONS,
) -> None:
    """Serve tenants' requests: authenticate, charge, route to each revision's router."""
    import asyncio

    from radixfleet.entry.main import EntryOptions, serve

    options = EntryOptions(port=port, replicas=replicas, region=region, metrics_port=metrics_port,
                           sync_seconds=sync_seconds, cluster_domain=cluster_domain,
                           prometheus_url=prometheus_url,
                           upstream_connections=upstream_connections)  # fmt: skip
    asyncio.run(serve(options))
