"""Token budgets on the request path: an aiohttp middleware for a region's entry.

`TokenGate.install(app)` is the whole interface. For each generation request the gate finds
the tenant by its API key (`Authorization: Bearer KEY`; an unknown key answers 401), reads the
model, counts the prompt with the model's own tokenizer (at its router, through the entry's
`count`; a bound no tokenizer exceeds when the router cannot count), and asks the ledger:
throttled requests get 429 with `Retry-After` and SGLang's error body and never reach a
replica. An admitted request's answer is metered as it passes: streamed bytes through the
response's `write` (hooked when the response is prepared, so the handler stays unaware), a
whole answer from its body. The end settles the ledger with the replica's exact usage; an
answer that failed before anything was generated (a 4xx/5xx, a client gone before the first
token) gives its prompt back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.ledger import Throttled, Ticket, TokenLedger
from radixfleet.controllers.quota.metrics import TokenMetrics
from radixfleet.controllers.quota.shares import ConcurrencyShares
from radixfleet.controllers.quota.usage import (
    StreamMeter,
    Usage,
    byte_bound,
    completion_cap,
    id_tokens,
    prompt_texts,
    usage_of,
    usage_of_answers,
)
from radixfleet.dataplane.gate import TENANT, CountPrompt, ModelOf
from radixfleet.dataplane.openai import error_body

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
METERED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/generate"})


@dataclass
class Metered:
    """One admitted request's ticket and the meter of its answer."""

    ticket: Ticket
    meter: StreamMeter = field(default_factory=StreamMeter)


METER_KEY = web.RequestKey("radixfleet.quota.meter", Metered)


@dataclass
class TokenGate:
    """Identify, admit or throttle, meter and settle. `keys` maps API key to tenant;
    `expiries`, the keys that expire to when (a key past it is unknown)."""

    ledger: TokenLedger
    keys: Mapping[str, str]
    metrics: TokenMetrics | None = None
    clock: Callable[[], float] = time.monotonic
    expiries: Mapping[str, datetime] = field(default_factory=dict)
    wall_clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    paths: frozenset[str] = METERED_PATHS
    model_of: ModelOf | None = None
    count: CountPrompt | None = None  # the gate's own way to count prompts, before the entry's
    shares: ConcurrencyShares = field(default_factory=ConcurrencyShares)
    _entry_count: CountPrompt | None = field(default=None, init=False, repr=False)

    def install(
        self, app: web.Application, *, model_of: ModelOf | None = None,
        count: CountPrompt | None = None,
    ) -> None:  # fmt: skip
        """Add the gate to an application that is not running yet. `model_of(tenant, body)`
        is the model the entry will serve the request from (a tenant's only model when the body
        names none), so its per-model budget is charged even then; `count(tenant, model,
        texts)`, the prompt's tokens by that model's tokenizer, unless the gate was made with
        a `count` of its own."""
        self.model_of, self._entry_count = model_of, count
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(self._on_prepare)
        if self.metrics is not None:
            budgets = self.ledger.budgets.items()
            self.metrics.budgets({t: b.tokens_per_minute for t, b in budgets if b is not None})

    def tenant_of(self, request: web.Request) -> str | None:
        """The tenant whose key `request` carries (None: unknown, expired or missing)."""
        key = bearer(request)
        return None if self._expired(key) else self.keys.get(key)

    def _expired(self, key: str) -> datetime | None:
        """When `key` expired, if it has."""
        end = self.expiries.get(key)
        return end if end is not None and end <= self.wall_clock() else None

    def _unknown(self, request: web.Request) -> web.StreamResponse:
        expired = self._expired(bearer(request))
        message = ("Unknown or missing API key." if expired is None
                   else f"This API key expired at {expired.isoformat()}.")  # fmt: skip
        return web.json_response(error_body(401, message), status=401)

    def _tenants(self) -> int:
        """How many tenants have keys: each gets an equal share of the connections."""
        return len(set(self.keys.values()))

    def reload(
        self,
        *,
        budgets: Mapping[str, TokenBudget | None],
        keys: Mapping[str, str],
        expiries: Mapping[str, datetime] | None = None,
    ) -> None:
        """New budgets and keys, as the Tenants and their Secrets changed (in a cluster the
        entry calls this from its sync, with `observe.api_keys` for the keys). Requests under
        way are not touched: a key removed or expired refuses only the requests after it."""
        self.ledger.set_budgets(budgets, now=self.clock())
        self.keys = dict(keys)
        self.expiries = dict(expiries or {})
        if self.metrics is not None:
            self.metrics.budgets(
                {t: b.tokens_per_minute for t, b in budgets.items() if b is not None}
            )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST" or request.path not in self.paths:
            return await handler(request)
        tenant = self.tenant_of(request)
        if tenant is None:
            return self._unknown(request)
        request[TENANT] = tenant  # the entry resolves the model among this tenant's only
        owing = self.ledger.owing(tenant, now=self.clock())
        if owing is not None:  # refused before its body is read: it costs the entry nothing
            return self._throttled(owing)
        if not self.shares.take(tenant, tenants=self._tenants()):
            return self._over_share(tenant)
        try:
            return await self._admit(request, handler, tenant)
        finally:
            self.shares.give_back(tenant)

    async def _admit(
        self, request: web.Request, handler: Handler, tenant: str
    ) -> web.StreamResponse:
        body = await _json(request)  # aiohttp keeps the bytes: the handler reads them again
        model = self._model(tenant, body)
        prompt = await self._prompt(tenant, model, body)
        reserve = completion_cap(body, path=request.path)
        admitted = self.ledger.admit(tenant, model, prompt, now=self.clock(), reserve=reserve)
        if isinstance(admitted, Throttled):
            return self._throttled(admitted)
        self._count(admitted, kind="prompt", tokens=prompt)
        metered = Metered(admitted)
        request[METER_KEY] = metered
        try:
            response = await handler(request)
        except BaseException:  # an error answer or a client gone: settle what was served
            self.settle(metered, metered.meter.usage, failed=True)
            raise
        self._finish(metered, response)
        return response

    def _model(self, tenant: str, body: dict[str, Any]) -> str:
        named = str(body.get("model") or "")
        if self.model_of is None:
            return named
        try:
            return self.model_of(tenant, body)
        except Exception:
            return named

    async def _prompt(self, tenant: str, model: str, body: dict[str, Any]) -> int:
        """The prompt's tokens: its texts by the model's tokenizer, or their byte bound when
        that cannot count them; token ids one each."""
        texts, count = prompt_texts(body), self.count or self._entry_count
        counted = await count(tenant, model, texts) if count and texts else None
        if self.metrics is not None and texts:
            self.metrics.counted(model, by="tokenizer" if counted is not None else "bytes")
        return (counted if counted is not None else byte_bound(texts)) + id_tokens(body)

    def _throttled(self, throttled: Throttled) -> web.StreamResponse:
        if self.metrics is not None:
            self.metrics.throttle(throttled.tenant)
        message = (
            f"Token budget of {throttled.budget} is spent; retry in {throttled.retry_after} s."
        )
        return web.json_response(
            error_body(429, message),
            status=429,
            headers={"Retry-After": str(throttled.retry_after)},
        )

    def _over_share(self, tenant: str) -> web.StreamResponse:
        if self.metrics is not None:
            self.metrics.throttle(tenant)
        share = self.shares.share(self._tenants())
        message = (f"{share} requests of this tenant are under way, its share of the entry's "
                   "connections; retry when one has ended.")  # fmt: skip
        return web.json_response(error_body(429, message, code="concurrency_limit_exceeded"),
                                 status=429, headers={"Retry-After": "1"})  # fmt: skip

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        metered = request.get(METER_KEY)
        if metered is None or isinstance(response, web.Response):
            return  # whole answers are read from their body in `_finish`
        write = response.write

        async def metered_write(data: bytes | bytearray | memoryview) -> None:
            self._streamed(metered, bytes(data))
            await write(data)

        response.write = metered_write  # type: ignore[method-assign]

    def _streamed(self, metered: Metered, data: bytes) -> None:
        tokens = metered.meter.feed(data)
        if tokens:
            self.ledger.charge(metered.ticket, tokens, now=self.clock())
            self._count(metered.ticket, kind="completion", tokens=tokens)

    def _finish(self, metered: Metered, response: web.StreamResponse) -> None:
        usage = metered.meter.usage
        if isinstance(response, web.Response) and isinstance(response.body, bytes):
            usage = _usage_of_body(response.body)
        self.settle(metered, usage, failed=response.status >= 400)

    def settle(self, metered: Metered, usage: Usage, *, failed: bool) -> None:
        """Settle the ticket. A failure before anything was generated gives the prompt back;
        once tokens have flowed the replica has read the prompt, so a stream cut then (a client
        that hangs up after its first event) stays charged for it."""
        prompt = usage.prompt
        nothing = usage.prompt is None and usage.completion is None
        if failed and nothing and metered.meter.completion == 0:
            prompt = 0
        completion = usage.completion if usage.completion is not None else metered.meter.completion
        ticket = metered.ticket
        dp, dc = self.ledger.settle(ticket, prompt=prompt, completion=completion, now=self.clock())
        self._count(ticket, kind="prompt", tokens=dp)
        self._count(ticket, kind="completion", tokens=dc)

    def _count(self, ticket: Ticket, *, kind: str, tokens: int) -> None:
        if self.metrics is not None:
            self.metrics.charged(ticket.tenant, ticket.model, kind=kind, tokens=tokens)


def bearer(request: web.Request) -> str:
    """The key of `Authorization: Bearer KEY` (empty without one)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}  # the handler answers 400 for it; nothing is charged but the settlement
    return body if isinstance(body, dict) else {}


def _usage_of_body(body: bytes) -> Usage:
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return Usage()
    if isinstance(answer, list):  # SGLang's `/generate` answers a batch as a list
        return usage_of_answers(answer)
    return usage_of(answer) if isinstance(answer, dict) else Usage()
