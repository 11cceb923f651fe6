"""The prompt prefixes each model's requests began with, kept by the region entry for pre-warming.

In a cluster the entry is the one component that sees every prompt of a tenant's model (smg
keeps a tree per revision and exposes no popularity), so it counts their prefixes per namespace
and model, as the local fleet's gateway does: text prompts cut into 256-character blocks
(radixfleet/localfleet/prewarm.py; a chat's messages are templated by the replica and do not count),
their prefixes' decayed counts in a `radixfleet.prefixes.PrefixPopularity`. When a new replica
is about to serve, the autoscaler asks for the hottest
(radixfleet/controllers/autoscale/warming.py):

    GET /fleet/v1/prefixes/{namespace}/{model}?kvBlocks=N&kvFraction=F&minHits=H
        -> {"prefixes": ["<text>", ...]}   the most valuable first

Prompts are tenant data: only the data plane's key of that namespace opens the route (the
operator holds it to warm replicas; tenants never see it). Each entry replica counts the requests
it served: behind a Service of two replicas, each sees about half of them. A model no route leads
to any more is forgotten at the entry's next sync (`keep_only`).
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from radixfleet.dataplane.errors import EntryError
from radixfleet.prefixes import PrefixPopularity, hottest, prompt_blocks

PATH = "/fleet/v1/prefixes/{namespace}/{model}"
# A replica's KV cache in 256-character blocks: 10 million is 640M tokens, no GPU holds more.
MAX_KV_BLOCKS = 10_000_000
MAX_MIN_HITS = 1000.0

KeysOf = Callable[[str], list[str]]


@dataclass
class HotPrefixes:
    """Per (namespace, model) popularity, and the route that reads the hottest of it.

    `keys_of(namespace)` are the namespace's data-plane keys as the entry knows them (none
    while unknown: nobody is let in; two during a rotation: either lets in)."""

    keys_of: KeysOf
    clock: Callable[[], float] = time.monotonic
    models: dict[tuple[str, str], PrefixPopularity] = field(default_factory=dict)

    def install(self, app: web.Application) -> None:
        app.add_routes([web.get(PATH, self.hottest)])

    def keep_only(self, served: set[tuple[str, str]]) -> None:
        """Forget the models no route leads to any more (deleted, or their tenant gone): their
        prompts are tenant data, and the entry runs for months."""
        for gone in set(self.models) - served:
            del self.models[gone]

    def record(self, namespace: str, model: str, body: dict[str, Any]) -> None:
        """The entry sends `body` to `model` of `namespace`: count its prompt's prefixes."""
        blocks = prompt_blocks(body)
        if blocks:
            popularity = self.models.setdefault((namespace, model), PrefixPopularity())
            popularity.record(blocks, self.clock())

    async def hottest(self, request: web.Request) -> web.StreamResponse:
        """The prefixes a new replica of the model should hold first, as texts."""
        namespace, model = request.match_info["namespace"], request.match_info["model"]
        self._authorize(request, namespace)
        kv_blocks = _number(request, "kvBlocks", 1, MAX_KV_BLOCKS, whole=True)
        kv_fraction = _number(request, "kvFraction", 0.01, 1.0)
        min_hits = _number(request, "minHits", 1.0, MAX_MIN_HITS)
        popularity = self.models.get((namespace, model))
        picks = [] if popularity is None else hottest(
            popularity, kv_blocks=int(kv_blocks), kv_fraction=kv_fraction, min_hits=min_hits,
            now=self.clock(),
        )  # fmt: skip
        return web.json_response({"prefixes": ["".join(map(str, p)) for p in picks]})

    def _authorize(self, request: web.Request, namespace: str) -> None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # Constant time, against every key: none must leak through how fast a wrong one is
        # refused.
        matches = [hmac.compare_digest(given.strip().encode(), k.encode())
                   for k in self.keys_of(namespace)]  # fmt: skip
        if scheme.lower() != "bearer" or not any(matches):
            raise EntryError(401, f"Unknown or missing data-plane key of {namespace}.")


def _number(
    request: web.Request, name: str, low: float, high: float, *, whole: bool = False
) -> float:
    """Query parameter `name`, a finite number in [low, high] (a whole one if `whole`)."""
    raw = request.query.get(name)
    if raw is None:
        raise EntryError(400, f"Parameter '{name}' is required.")
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise EntryError(400, f"Parameter '{name}' must be {kind}, not {raw[:40]!r}.") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise EntryError(400, f"Parameter '{name}' must be between {low:g} and {high:g}.")
    return value
