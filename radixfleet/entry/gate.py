"""What the region entry asks of the gate in front of its routes (the quota's token gate).

The gate authenticates every generation request: it answers 401 itself for an unknown key,
and for a known one sets `request[TENANT]` before the entry's handler runs, so the handler
resolves the model among that tenant's models only. `sync` re-reads the tenants, their keys
and budgets from the cluster (it blocks: the entry calls it in a thread) and returns each
tenant's namespaces, where its models live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry

TENANT = web.RequestKey("radixfleet.entry.tenant", str)


class EntryGate(Protocol):
    def install(self, app: web.Application) -> None: ...

    def tenant_of(self, request: web.Request) -> str | None: ...

    def sync(self) -> Mapping[str, Sequence[str]]: ...

    def registry(self) -> CollectorRegistry: ...
