"""What the region entry asks of the gate in front of its routes (the quota's token gate).

The gate authenticates every generation request: it answers 401 itself for an unknown key,
and for a known one sets `request[TENANT]` before the entry's handler runs, so the handler
resolves the model among that tenant's models only. It charges a prompt as the model's
tokenizer counts it (`count`, which the front asks of its backend). `sync` re-reads the
tenants, their keys and budgets from the cluster (it blocks: the entry calls it in a thread)
and returns each tenant's namespaces, where its models live.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry

TENANT = web.RequestKey("radixfleet.entry.tenant", str)
# The model a tenant's request will be served from, as the entry resolves it (the tenant's only
# model when the body names none); the gate charges that model's budget. Raises for a request
# the entry will refuse.
ModelOf = Callable[[str, dict[str, Any]], str]
# The tokens of a tenant's prompt texts by the model's own tokenizer (tenant, model, texts);
# None when it cannot count them now (radixfleet/dataplane/tokens.py).
CountPrompt = Callable[[str, str, Sequence[str]], Awaitable[int | None]]


class Gate(Protocol):
    """What every entry's front asks of its gate (radixfleet/dataplane/front.py)."""

    def install(
        self, app: web.Application, *, model_of: ModelOf | None = None,
        count: CountPrompt | None = None,
    ) -> None: ...  # fmt: skip

    def tenant_of(self, request: web.Request) -> str | None: ...


class EntryGate(Gate, Protocol):
    """The cluster entry's gate: also kept in step with the cluster."""

    def sync(self) -> Mapping[str, Sequence[str]]: ...

    def registry(self) -> CollectorRegistry: ...

    async def keep(self) -> None:
        """The gate's own background work, until cancelled (its last word then)."""
        ...
