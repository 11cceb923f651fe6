"""The entry's view of the cluster, re-read every few seconds, and the RBAC it needs.

Polling keeps the entry simple and its replicas independent: each lists the InferenceServices
(KServe's traffic status) and asks the gate to re-read the tenants. A failed read keeps the last
table (requests keep flowing on what was known) and is retried at the next interval. Each pass
is one list of InferenceServices, one of Tenants and one read per API-key Secret; a fleet with
many tenants would want watches instead (not built yet).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from radixfleet.entry.routes import build_routes
from radixfleet.entry.server import ClusterEntry
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import INFERENCE_SERVICES
from radixfleet.kit.rbac import PolicyRule

log = logging.getLogger(__name__)

RULES: tuple[PolicyRule, ...] = (INFERENCE_SERVICES.rule("list"),)


class InferenceServices(Protocol):
    def everywhere(self) -> list[dict[str, Any]]: ...


async def keep_in_sync(entry: ClusterEntry, isvcs: InferenceServices, *, interval_s: float) -> None:
    """Refresh the entry's routes, keys and budgets every `interval_s`, until cancelled."""
    while True:
        try:
            namespaces = await asyncio.to_thread(entry.gate.sync)
            entry.routes = build_routes(namespaces, await asyncio.to_thread(isvcs.everywhere))
        except KubeError as error:
            log.warning("cluster read failed (%s); serving on the last table", error)
        except Exception:  # no answer at all (the client's connection errors): the same
            log.exception("cluster read failed; serving on the last table")
        await asyncio.sleep(interval_s)
