"""Wire the entry together: the gate a plug-in offers, the routes kept in sync, the server.

Without a gate the entry does not start: every request must be authenticated and charged to
one tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from prometheus_client import start_http_server

from radixfleet.dataplane.prefixes import HotPrefixes
from radixfleet.dataplane.relay import entry_runner, upstream_timeout
from radixfleet.dataplane.signals import TOKEN_ENV, SignalsRelay
from radixfleet.entry import DRAIN_S
from radixfleet.entry.kube import KubeCanaryPolicies, KubeDataPlaneKeys, keep_in_sync
from radixfleet.entry.server import ClusterEntry, Upstreams
from radixfleet.kit.kube import KubeInferenceServices, api_client
from radixfleet.kit.registry import entry_gate, load_entry_gate
from radixfleet.platform import PROMETHEUS_URL, UPSTREAM_CONNECTIONS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntryOptions:
    port: int = 8000
    replicas: int = 1
    region: str = "local"
    metrics_port: int = 9464
    sync_seconds: float = 2.0
    cluster_domain: str = "cluster.local"
    prometheus_url: str = PROMETHEUS_URL
    upstream_connections: int = UPSTREAM_CONNECTIONS  # shared fairly among the tenants


def signals_relay(
    options: EntryOptions, session: aiohttp.ClientSession, environ: Mapping[str, str]
) -> SignalsRelay | None:
    """The failover's read of this region's Prometheus; off without the fleet token."""
    token = environ.get(TOKEN_ENV, "")
    if not token:
        log.info("fleet signals off: $%s is not set", TOKEN_ENV)
        return None
    return SignalsRelay(token=token, session=session, prometheus_url=options.prometheus_url)


async def serve(options: EntryOptions) -> None:
    """Run until cancelled."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    api = api_client()
    pool = options.upstream_connections
    gate = load_entry_gate(entry_gate())(api, options.replicas, options.region,
                                         upstream_connections=pool)  # fmt: skip
    start_http_server(options.metrics_port, registry=gate.registry())
    connector = aiohttp.TCPConnector(limit=pool)  # shared fairly by the gate
    async with aiohttp.ClientSession(timeout=upstream_timeout(), connector=connector) as session:
        upstreams = Upstreams(cluster_domain=options.cluster_domain)
        entry = ClusterEntry(gate=gate, session=session, upstreams=upstreams,
                             signals=signals_relay(options, session, os.environ))  # fmt: skip
        entry.prefixes = HotPrefixes(keys_of=entry.keys_of)
        listed, keys = KubeInferenceServices(api), KubeDataPlaneKeys(api)
        sync = asyncio.create_task(
            keep_in_sync(
                entry,
                listed,
                keys,
                interval_s=options.sync_seconds,
                policies=KubeCanaryPolicies(api),
            )
        )
        kept = asyncio.create_task(gate.keep())
        runner = entry_runner(entry.app(), shutdown_timeout=DRAIN_S)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", options.port).start()
        log.info("entry serving on :%d (%d replicas share each budget)", options.port,
                 options.replicas)  # fmt: skip
        try:
            await _stopped()
        finally:
            sync.cancel()
            # Stops accepting, then waits up to DRAIN_S for the answers under way.
            await runner.cleanup()
            # After the answers under way: the gate's last word counts what they charged.
            kept.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await kept
            log.info("entry stopped")


async def _stopped() -> None:
    """Return on SIGTERM, the kubelet's stop (without a handler, Python dies at once, cutting
    every stream the entry is sending)."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    log.info("SIGTERM: draining the answers under way (at most %d s)", DRAIN_S)
