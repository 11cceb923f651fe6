"""Run controllers under one kopf operator: the one `run` behind every `radixfleet ... run`.

`radixfleet operator run` runs every registered controller (the opt-in failover only when
asked) in one process; `radixfleet canary run` and the others run one plug-in through the same
function (`radixfleet.kit.commands` builds those commands). One kopf registry takes every
controller's handlers; the operator's settings are set once (`kopfglue.configure`): kopf's
bookkeeping in annotations under one prefix, and kopf peering for leader election (why
peering: `radixfleet.kit.leader`). Three ports:

- liveness: kopf's own endpoint, GET /healthz;
- readiness: GET /readyz, 200 while this replica leads the peering or stands by to take over;
- metrics: Prometheus text, the kit's per-controller ticks, errors and decisions together
  with each controller's own series.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from radixfleet.kit.health import serve_readiness
from radixfleet.kit.kopfglue import configure
from radixfleet.kit.leader import (
    PEERING_NAME,
    PeeringReadiness,
    kube_peers,
    peering_identity,
    peering_priority,
)
from radixfleet.kit.metrics import METRICS
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions

LIVENESS_PORT, READINESS_PORT, METRICS_PORT = 8080, 8081, 9464


@dataclass(frozen=True)
class Ports:
    """Where the operator listens; None turns a server off (a local run needs none)."""

    liveness: int | None = LIVENESS_PORT
    readiness: int | None = READINESS_PORT
    metrics: int | None = METRICS_PORT


def build_registry(
    plugins: Sequence[ControllerPlugin], controllers: dict[str, Any], *, peering: str | None,
    priority: int,
) -> kopf.OperatorRegistry:  # fmt: skip
    """One kopf registry with every plug-in's handlers and the operator's settings."""
    registry = kopf.OperatorRegistry()

    # kopf registers its login handlers only on its default registry; ours needs its own, or the
    # operator never authenticates (in-cluster service account, else the kubeconfig).
    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    def settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, peering=peering, priority=priority)

    for plugin in plugins:
        plugin.register(registry, controllers[plugin.name])
    return registry


def metrics_registry(
    plugins: Sequence[ControllerPlugin], controllers: dict[str, Any]
) -> CollectorRegistry:
    """What the metrics port serves: the kit's counters, the controllers' series, the process."""
    served = CollectorRegistry(auto_describe=False)
    served.register(METRICS.registry)
    served.register(REGISTRY)  # process metrics, and series on the default registry
    for plugin in plugins:
        own = plugin.metrics(controllers[plugin.name])
        if own is not None:
            served.register(own)
    return served


def run(
    plugins: Sequence[ControllerPlugin],
    *,
    options: OperatorOptions,
    namespaces: Sequence[str] = (),
    standalone: bool = False,
    ports: Ports = Ports(),
    verbose: bool = False,
) -> None:
    """Build the plug-ins' controllers and run them until interrupted."""
    kopf.configure(verbose=verbose)  # kopf's own log format, as its CLI sets it up
    controllers = {p.name: p.build(options) for p in plugins}
    priority, identity = peering_priority(), peering_identity()
    peering = None if standalone else PEERING_NAME
    registry = build_registry(plugins, controllers, peering=peering, priority=priority)
    if ports.metrics is not None:
        start_http_server(ports.metrics, registry=metrics_registry(plugins, controllers))
    started = threading.Event()
    if ports.readiness is not None:
        readiness = PeeringReadiness(
            started=started.is_set, peers=None if standalone else _peers(), identity=identity,
            priority=priority, clock=lambda: datetime.now(UTC),
        )  # fmt: skip
        serve_readiness(port=ports.readiness, role=readiness.role)
    # A peering name makes peering mandatory in kopf (`settings.peering.mandatory`), and a
    # standalone operator watches no peering resource: with both, kopf pauses every watch
    # forever ("peering CRD is missing"). So a standalone operator names none.
    kopf.run(
        registry=registry, namespaces=list(namespaces), clusterwide=not namespaces,
        standalone=standalone, priority=priority, peering_name=peering, identity=identity,  # type: ignore[arg-type]
        liveness_endpoint=_liveness(ports.liveness), ready_flag=started,
    )  # fmt: skip


def _peers() -> Any:
    from radixfleet.kit.kube import api_client

    return kube_peers(api_client())


def _liveness(port: int | None) -> str | None:
    return None if port is None else f"http://0.0.0.0:{port}/healthz"
