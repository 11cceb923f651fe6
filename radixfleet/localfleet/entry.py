"""A region's request entry: routes OpenAI-style requests by model, and wakes models from zero.

The entry stands where Knative's activator stands in a cluster, in front of each model's
smg gateway: it reads the request's `model`, and when that model has no ready replica it asks
the model's `Scaler` for one and holds the request until the replica is healthy and registered
with the router (scale-to-zero loses no request). A request held longer than the wake timeout
gets 503 with `Retry-After`. Answers stream through unchanged.

A revision may have several router replicas (`RouterPool`). The entry sends each request to one
of them: by a consistent (rendezvous) hash of the prompt's opening characters, so that requests
sharing a system prompt meet the same replica's approximate tree, or at random.

A model may have a canary revision beside its stable one, each behind its own router (a
router's prefix tree is per revision, as each revision's pods are). The entry then splits the
model's requests at random by the canary's percent, as Knative's route does for KServe's
`canaryTrafficPercent`; the split is per request, not per session. While a rollout runs a
baseline (the stable model on replicas of its own, radixfleet/controllers/canary/README.md), the
baseline is sent as much as the canary once one of its replicas is ready
(`radixfleet.revisions.pick_revision`, the twin's split too).

`RegionEntry` is a backend of the one front every entry serves (`radixfleet/dataplane/front.py`:
the routes, the gate, a tenant's models, bad input answered with its status and OpenAI's error
body, never a traceback); `owners` scopes a model to the tenants whose keys may call it, as the
cluster's entry scopes an InferenceService to its namespace's tenant.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from radixfleet.dataplane import openai
from radixfleet.dataplane.errors import EntryError
from radixfleet.dataplane.front import Front, Models
from radixfleet.dataplane.gate import Gate
from radixfleet.dataplane.relay import (
    FAILED_BEFORE_ANSWERING,
    NOT_REACHED,
    not_ready_yet,
    relay,
    retry_after,
)
from radixfleet.dataplane.signals import SignalsRelay
from radixfleet.dataplane.tokens import RouterTokenizers
from radixfleet.localfleet.lora import AdapterRouter
from radixfleet.localfleet.scaler import PromptRecorder, Scaler
from radixfleet.localfleet.spec import RouterSpread
from radixfleet.revisions import BASELINE, CANARY, pick_revision

log = logging.getLogger(__name__)

# How much of a prompt picks its router replica: about 256 tokens, inside any system prompt
# worth caching, and short enough that a conversation's turns keep their replica.
AFFINITY_CHARS = 1024
_JSON = "application/json"


@dataclass(frozen=True)
class RouterPool:
    """One revision's router replicas as the entry reaches them, and how it spreads requests."""

    urls: tuple[str, ...]
    spread: RouterSpread = "prefix"

    @property
    def key(self) -> str:
        """The pool's name (its first router's URL): the drain count is kept under it."""
        return self.urls[0]

    def pick(self, body: Mapping[str, Any], rng: random.Random) -> str:
        """The router replica for a request with this body."""
        if len(self.urls) == 1:
            return self.urls[0]
        if self.spread == "random":
            return rng.choice(self.urls)
        opening = affinity_text(body)
        return max(self.urls, key=lambda url: _weight(url, opening))


def as_pool(router: str | RouterPool) -> RouterPool:
    """A router URL as a pool of one; a pool as it is."""
    return router if isinstance(router, RouterPool) else RouterPool((router,))


def affinity_text(body: Mapping[str, Any]) -> str:
    """The prompt's opening characters, however the request gives its prompt; only the opening
    is read, so a huge prompt costs no more than a short one."""
    prompt = body.get("messages", body.get("prompt", body.get("text", body.get("input_ids"))))
    pieces, room = [], AFFINITY_CHARS
    for text in _texts(prompt):
        pieces.append(text[:room])
        room -= len(pieces[-1])
        if room <= 0:
            break
    return "".join(pieces)


def _texts(value: Any) -> Iterator[str]:
    """The text of a prompt in order: strings, chat messages (role, then content or text
    parts), token ids."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        yield f"{value.get('role', '')}:"
        yield from _texts(value.get("content", value.get("text")))
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif value is not None:
        yield f"{value} "


def _weight(url: str, opening: str) -> bytes:
    # Rendezvous hashing: adding or removing a replica moves only the prompts it wins or held.
    return hashlib.blake2b(f"{url}\n{opening}".encode(), digest_size=8).digest()


@dataclass(frozen=True)
class Baseline:
    """The stable model on replicas and a router of their own, beside a canary."""

    router: str | RouterPool
    scaler: Scaler


@dataclass
class Canary:
    """A model's canary revision as the entry routes to it: routers, replicas, traffic share."""

    revision: str
    router: str | RouterPool
    scaler: Scaler
    percent: int = 0  # of the model's requests, 0..100
    baseline: Baseline | None = None


class RegionEntry:
    """The aiohttp application of one region's entry."""

    def __init__(
        self,
        *,
        region: str,
        scalers: Mapping[str, Scaler],
        routers: Mapping[str, str | RouterPool],
        session: aiohttp.ClientSession,
        wake_timeout_s: float,
        retry_after_s: int,
        gate: Gate | None = None,
        signals: SignalsRelay | None = None,
        split_seed: int | None = None,
        owners: Mapping[str, Collection[str]] | None = None,
        adapters: Mapping[str, AdapterRouter] | None = None,
    ) -> None:
        self.region = region
        self.scalers = dict(scalers)  # per model: the stable revision's
        self.routers = {model: as_pool(router) for model, router in routers.items()}
        self.canaries: dict[str, Canary] = {}
        self._split = random.Random(split_seed)
        self._spread = random.Random(split_seed)  # its own draws: the split stays reproducible
        self.session = session
        self.tokenizers = RouterTokenizers(session)
        self.wake_timeout_s = wake_timeout_s
        self.retry_after_s = retry_after_s
        self.accepting = True  # False: the region is down (failover tests), every request 503s
        self.in_flight: Counter[str] = Counter()
        self.in_flight_by_router: Counter[str] = Counter()  # by pool key: is a revision drained
        self.woken: list[tuple[str, float]] = []  # (model, seconds a request was held)
        self.gate = gate
        self.signals = signals  # the fleet's failover reads the region's Prometheus through it
        self.started = int(time.time())  # the models' `created`: they exist since the entry does
        # By model: the tenants whose keys may call it (a model without: every tenant's).
        self.owners = {model: frozenset(tenants) for model, tenants in (owners or {}).items()}
        # By LoRA model: where its adapters' requests go (radixfleet/localfleet/lora.py).
        self.adapters = dict(adapters or {})
        self.app = self._build_app()

    def _build_app(self) -> web.Application:
        extras = [self.signals] if self.signals is not None else []
        return Front(self, gate=self.gate, extras=extras).app()

    # -- the front's backend (radixfleet/dataplane/front.py) ---------------------------------

    def models_of(self, tenant: str | None) -> Models:
        """The region's models `tenant` may call (without a gate: every one)."""
        names = [name for name in self.scalers if self._may_call(tenant, name)]
        # A LoRA model's adapters are models of their own, `BASE:ADAPTER`, as SGLang names them.
        names += [f"{name}:{adapter}" for name in names if name in self.adapters
                  for adapter in self.adapters[name].adapters]  # fmt: skip
        return {name: self._model_object(name) for name in names}

    def _may_call(self, tenant: str | None, model: str) -> bool:
        """No gate, or a model with no owners listed: anyone; else its owners only."""
        owners = self.owners.get(model)
        return tenant is None or owners is None or tenant in owners

    async def forward(
        self, request: web.Request, tenant: str | None, model: str, body: dict[str, Any],
        raw: bytes,
    ) -> web.StreamResponse:  # fmt: skip
        """Forward a generation request to its model's router, waking the model if needed."""
        del tenant  # the front resolved the model among the tenant's own
        base, _, adapter = model.partition(":")
        if adapter:
            return await self._forward_adapter(request, base, adapter, body, raw)
        scaler, pool = self._revision_for(model)
        if isinstance(scaler, PromptRecorder):
            scaler.record_prompt(body)
        self.in_flight[model] += 1
        self.in_flight_by_router[pool.key] += 1
        try:
            await self._ensure_capacity(scaler)
            return await self._forward(request, pool, body, raw)
        finally:
            self.in_flight[model] -= 1
            self.in_flight_by_router[pool.key] -= 1

    async def _forward_adapter(
        self, request: web.Request, model: str, adapter: str, body: dict[str, Any], raw: bytes
    ) -> web.StreamResponse:
        """Send a request for one of a LoRA model's adapters to a replica that holds it, waking
        the model and loading the adapter first if need be."""
        adapters, scaler = self.adapters[model], self.scalers[model]
        self.in_flight[model] += 1
        try:
            await self._ensure_capacity(scaler)
            async with adapters.serving(adapter, body) as replica:
                answer = await self._forward(request, RouterPool((replica,)), body, raw)
            adapters.answered(answer.status)
            return answer
        finally:
            self.in_flight[model] -= 1

    async def count_prompt(self, tenant: str, model: str, texts: Sequence[str]) -> int | None:
        """`texts`' tokens by the tokenizer of `model`'s router (its stable revision's)."""
        del tenant  # the front resolved the model among the tenant's own
        pool = self.routers.get(model.partition(":")[0])
        return await self.tokenizers.count(pool.urls[0], texts) if pool else None

    def healthy(self) -> bool:
        """While the region accepts requests (whatever its models' replica counts)."""
        return self.accepting

    def unavailable(self, message: str) -> EntryError:
        return EntryError(503, message, headers={"Retry-After": str(self.retry_after_s)})

    def promote(self, model: str) -> Canary:
        """Send all of `model`'s traffic to its canary, which becomes the stable revision."""
        canary = self.canaries.pop(model)
        self.scalers[model], self.routers[model] = canary.scaler, as_pool(canary.router)
        return canary

    def _model_object(self, name: str) -> dict[str, Any]:
        return {**openai.model_object(name, created=self.started, owned_by="radixfleet"),
                "region": self.region}  # fmt: skip

    # -- steps -------------------------------------------------------------------------------

    def _revision_for(self, model: str) -> tuple[Scaler, RouterPool]:
        canary = self.canaries.get(model)
        if canary is None:
            return self.scalers[model], self.routers[model]
        baseline = canary.baseline
        serving = baseline is not None and baseline.scaler.ready_count() > 0
        which = pick_revision(
            self._split.random(), weight=canary.percent, canary=True, baseline=serving
        )
        if which == CANARY:
            return canary.scaler, as_pool(canary.router)
        if which == BASELINE and baseline is not None:
            return baseline.scaler, as_pool(baseline.router)
        return self.scalers[model], self.routers[model]

    async def _ensure_capacity(self, scaler: Scaler) -> None:
        if not self.accepting:
            raise self.unavailable(f"Region {self.region} is not serving.")
        if scaler.ready_count() > 0:
            return
        held_since = time.monotonic()
        if scaler.desired() == 0:
            scaler.scale_to(1)  # wake from zero; replicas already starting need no push
        if not await scaler.wait_ready(timeout_s=self.wake_timeout_s):
            raise self.unavailable(
                f"The model '{scaler.model}' is starting from zero replicas; retry shortly."
            )
        self.woken.append((scaler.model, time.monotonic() - held_since))

    async def _forward(
        self, request: web.Request, pool: RouterPool, body: Mapping[str, Any], raw: bytes
    ) -> web.StreamResponse:
        deadline = time.monotonic() + self.wake_timeout_s
        routers = _rotation(pool, pool.pick(body, self._spread))
        resent = False
        for pause in _backoff():
            last_try = time.monotonic() + pause > deadline
            url = next(routers) + request.path
            try:
                answer = await self._try(request, url, raw, last_try, may_resend=not resent)
            except NOT_REACHED:
                # The request reached no router (one is restarting): another is safe.
                if last_try:
                    raise self.unavailable("The model's router is not reachable.") from None
                answer = None
            except FAILED_BEFORE_ANSWERING:
                # The client has seen nothing: one more try repeats nothing it saw; a second
                # loss is the client's.
                if resent:
                    raise
                resent, answer = True, None
            if answer is not None:
                return answer
            await asyncio.sleep(pause)
        raise AssertionError("unreachable: the backoff never ends")

    async def _try(
        self, request: web.Request, url: str, raw: bytes, last_try: bool, *, may_resend: bool
    ) -> web.StreamResponse | None:
        """The router's answer relayed, or None for an error it gives before any worker saw the
        request (retry shortly); with `may_resend`, `StreamFailedEarlyError` for a stream that
        failed before its first event."""
        # Only the body goes upstream: a tenant's key stays at the entry that checked it.
        headers = {"Content-Type": _JSON, openai.REQUEST_ID: openai.request_id(request)}
        async with self.session.post(url, data=raw, headers=headers) as upstream:
            if upstream.status < 400 or upstream.content_type == "text/event-stream":
                return await relay(request, upstream, may_resend=may_resend)
            body = await upstream.read()
            if not_ready_yet(upstream.status, body) and not last_try:
                return None
            return web.Response(
                status=upstream.status, body=body, content_type=upstream.content_type or _JSON,
                headers=retry_after(upstream),
            )  # fmt: skip


def _rotation(pool: RouterPool, first: str) -> Iterator[str]:
    """`first`, then the pool's other routers in turn, for ever."""
    start = pool.urls.index(first)
    while True:
        for offset in range(len(pool.urls)):
            yield pool.urls[(start + offset) % len(pool.urls)]


def _backoff() -> Iterator[float]:
    pause = 0.05
    while True:
        yield pause
        pause = min(pause * 2, 1.0)
