"""`radixfleet operator run`: every registered controller in one process, under kopf.

Canary, autoscale and quota always run; the failover only with `--with-failover` (it writes
global Route 53 records, so one operator per fleet runs it, not one per region). Leader
election is kopf peering (`radixfleet.kit.leader` says why); `--standalone` turns it off for a
single local replica. Imports only typer at the top: `radixfleet --help` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

operator_app = typer.Typer(
    name="operator",
    help="Run every radixfleet controller in one operator (kopf, leader-elected).",
    no_args_is_help=True,
)


@operator_app.command()
def run(
    region: Annotated[str, typer.Option(help="The region label of exported metrics.")] = "local",
    prometheus: Annotated[str | None, typer.Option(help="Prometheus URL of the region.")] = None,
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="Watch only these.")
    ] = None,
    with_failover: Annotated[
        bool, typer.Option("--with-failover", help="Also run the (fleet-wide) failover.")
    ] = False,
    failover_context: Annotated[
        list[str] | None,
        typer.Option(help="REGION=KUBECONFIG-CONTEXT of each region's cluster, for the failover."),
    ] = None,
    failover_namespace: Annotated[
        str, typer.Option(help="Namespace of the failover's floors ConfigMap in each region.")
    ] = "default",
    router_image: Annotated[
        str | None,
        typer.Option(envvar="RADIXFLEET_ROUTER_IMAGE", help="smg image of revisions' routers."),
    ] = None,
    standalone: Annotated[bool, typer.Option(help="No peering: one replica only.")] = False,
    liveness_port: Annotated[int, typer.Option(help="kopf's GET /healthz.")] = 8080,
    readiness_port: Annotated[int, typer.Option(help="GET /readyz: leader or standby.")] = 8081,
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics.")] = 9464,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="kopf's info logs.")] = False,
) -> None:
    """Run canary, autoscale, quota and routers (and the failover if asked) until interrupted."""
    from radixfleet.kit.operator import Ports
    from radixfleet.kit.operator import run as run_operator
    from radixfleet.kit.plugin import OperatorOptions, parse_contexts
    from radixfleet.kit.registry import selected

    options = OperatorOptions(
        region=region, prometheus_url=prometheus,
        failover_contexts=parse_contexts(failover_context or []),
        failover_namespace=failover_namespace, router_image=router_image,
    )  # fmt: skip
    plugins = selected(opt_in=["failover"] if with_failover else [])
    ports = Ports(liveness=liveness_port, readiness=readiness_port, metrics=metrics_port)
    typer.echo(f"radixfleet operator: {', '.join(p.name for p in plugins)}")
    run_operator(plugins, options=options, namespaces=namespace or (), standalone=standalone,
                 ports=ports, verbose=verbose)  # fmt: skip
