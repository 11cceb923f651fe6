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
baseline (the stable model on replicas of its own, canary/README.md), the baseline is sent as
much as the canary once one of its replicas is ready (`radixfleet.revisions.pick_revision`, the
twin's split too).

Bad input gets its status and OpenAI's error body (`radixfleet/entry/openai.py`), never a
traceback: malformed JSON 400, an unknown model 404, an unknown path 404, a wrong method 405
with `Allow`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from aiohttp.log import access_logger

from radixfleet.emulator.protocol import ApiError
from radixfleet.entry import openai
from radixfleet.entry.gate import ModelOf
from radixfleet.entry.signals import SignalsRelay
from radixfleet.fleet.scaler import PromptRecorder, Scaler
from radixfleet.fleet.spec import RouterSpread
from radixfleet.revisions import BASELINE, CANARY, pick_revision

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
# How much of a prompt picks its router replica: about 256 tokens, inside any system prompt
# worth caching, and short enough that a conversation's turns keep their replica.
AFFINITY_CHARS = 1024
_JSON = "application/json"


class EntryError(ApiError):
    """An error of the entry's own, with OpenAI's `code` and `param` and headers to send along
    (Retry-After)."""

    def __init__(
        self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
        code: str | None = None, param: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(status, message)
        self.headers = dict(headers or {})
        self.code = code
        self.param = param

    def answer(self) -> web.Response:
        body = openai.error_body(self.status, self.message, code=self.code, param=self.param)
        return web.json_response(body, status=self.status, headers=self.headers)


# The largest request body an entry reads: a million-token prompt is about 4 MiB of text, 8
# with JSON's escapes. Larger bodies get 413, by their Content-Length before any byte is read,
# else as soon as they pass it: four 60 MB bodies took an entry from 285 to 616 MiB (its limit
# is 512Mi), which would have cut every tenant's streams on that replica.
MAX_BODY_BYTES = 16 * 1024**2


def entry_application() -> web.Application:
    """The aiohttp application both region entries start from: their errors as OpenAI's, their
    bodies bounded, a request id on every answer."""
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    openai.install_request_ids(app)
    return app


def entry_runner(
    app: web.Application,
    *,
    shutdown_timeout: float,
    access_log: logging.Logger | None = access_logger,
) -> web.AppRunner:
    """The aiohttp runner of a region entry (the cluster's and the local fleet's).

    With `handler_cancellation`, a client that hangs up cancels its handler, which closes the
    request to the router, and smg aborts the generation. aiohttp's default runs the handler to
    the end: a whole (non-streamed) answer nobody will read was generated and charged, and the
    SDK's two retries of a timed-out call left three generations running."""
    return web.AppRunner(
        app, shutdown_timeout=shutdown_timeout, access_log=access_log, handler_cancellation=True
    )


def model_not_found(name: object) -> EntryError:
    """404 for a model the caller cannot use (another tenant's looks exactly like none)."""
    message = f"The model '{name}' does not exist."
    return EntryError(404, message, code="model_not_found", param="model")


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


class Gate(Protocol):
    """Something in front of the routes, e.g. the token budgets of policies/quota/gate.py."""

    def install(self, app: web.Application, *, model_of: ModelOf | None = None) -> None: ...

    def tenant_of(self, request: web.Request) -> str | None: ...


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
    ) -> None:
        self.region = region
        self.scalers = dict(scalers)  # per model: the stable revision's
        self.routers = {model: as_pool(router) for model, router in routers.items()}
        self.canaries: dict[str, Canary] = {}
        self._split = random.Random(split_seed)
        self._spread = random.Random(split_seed)  # its own draws: the split stays reproducible
        self.session = session
        self.wake_timeout_s = wake_timeout_s
        self.retry_after_s = retry_after_s
        self.accepting = True  # False: the region is down (failover tests), every request 503s
        self.in_flight: Counter[str] = Counter()
        self.in_flight_by_router: Counter[str] = Counter()  # by pool key: is a revision drained
        self.woken: list[tuple[str, float]] = []  # (model, seconds a request was held)
        self.gate = gate
        self.signals = signals  # the fleet's failover reads the region's Prometheus through it
        self.started = int(time.time())  # the models' `created`: they exist since the entry does
        self.app = self._build_app()

    def _build_app(self) -> web.Application:
        app = entry_application()
        app.add_routes([web.post(path, self.proxy) for path in PROXIED_PATHS])
        app.add_routes([web.get("/v1/models", self.models), web.get("/health", self.health),
                        web.get("/v1/models/{model}", self.model)])  # fmt: skip
        if self.gate is not None:  # inside the error middleware: a throttled request never wakes
            self.gate.install(app, model_of=lambda _tenant, body: self._model_for(body))
        if self.signals is not None:
            self.signals.install(app)
        return app

    # -- routes ------------------------------------------------------------------------------

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """Forward a generation request to its model's router, waking the model if needed."""
        raw = await request.read()
        body = parse_body(raw)
        model = self._model_for(body)
        if request.path.startswith("/v1/") and body.get("model") != model:
            # The router's OpenAI routes require the name the entry defaulted to.
            raw = json.dumps({**body, "model": model}).encode()
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

    def promote(self, model: str) -> Canary:
        """Send all of `model`'s traffic to its canary, which becomes the stable revision."""
        canary = self.canaries.pop(model)
        self.scalers[model], self.routers[model] = canary.scaler, as_pool(canary.router)
        return canary

    async def models(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's model list: the models this region serves (with a gate: to a known key)."""
        self._authenticate(request)
        data = [self._model_object(name) for name in self.scalers]
        return web.json_response({"object": "list", "data": data})

    async def model(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's `GET /v1/models/{model}`."""
        self._authenticate(request)
        name = request.match_info["model"]
        if name not in self.scalers:
            raise model_not_found(name)
        return web.json_response(self._model_object(name))

    def _authenticate(self, request: web.Request) -> None:
        if self.gate is not None and self.gate.tenant_of(request) is None:
            raise EntryError(401, "Unknown or missing API key.")

    def _model_object(self, name: str) -> dict[str, Any]:
        return {**openai.model_object(name, created=self.started, owned_by="radixfleet"),
                "region": self.region}  # fmt: skip

    async def health(self, _request: web.Request) -> web.StreamResponse:
        """200 while the region accepts requests (whatever its models' replica counts)."""
        return web.Response(status=200 if self.accepting else 503)

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

    def _model_for(self, body: dict[str, Any]) -> str:
        name = body.get("model")
        if name is None or name == "default":
            if len(self.scalers) == 1:
                return next(iter(self.scalers))
            message = f"Field 'model' is required: {self.region} serves several."
            raise EntryError(400, message, param="model")
        if not isinstance(name, str) or name not in self.scalers:
            raise model_not_found(name)
        return name

    async def _ensure_capacity(self, scaler: Scaler) -> None:
        if not self.accepting:
            raise self._unavailable(f"Region {self.region} is not serving.")
        if scaler.ready_count() > 0:
            return
        held_since = time.monotonic()
        if scaler.desired() == 0:
            scaler.scale_to(1)  # wake from zero; replicas already starting need no push
        if not await scaler.wait_ready(timeout_s=self.wake_timeout_s):
            raise self._unavailable(
                f"The model '{scaler.model}' is starting from zero replicas; retry shortly."
            )
        self.woken.append((scaler.model, time.monotonic() - held_since))

    def _unavailable(self, message: str) -> EntryError:
        return EntryError(503, message, headers={"Retry-After": str(self.retry_after_s)})

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
            except aiohttp.ClientConnectorError:
                # Refused: the request reached no router (one is restarting); another is safe.
                if last_try:
                    raise self._unavailable("The model's router is not reachable.") from None
                answer = None
            except (aiohttp.ServerDisconnectedError, StreamFailedEarlyError):
                # The router went away, or the stream failed, before the client saw anything:
                # one more try repeats nothing it saw; a second loss is the client's.
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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as its status and OpenAI's JSON body (`openai.py`), never a traceback."""
    try:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise EntryError(413, f"The request body is larger than {MAX_BODY_BYTES} bytes.")
        return await handler(request)
    except EntryError as err:
        return err.answer()
    except ApiError as err:
        return EntryError(err.status, err.message).answer()
    except web.HTTPException as err:
        if err.status < 400:
            raise
        kept = {k: v for k, v in err.headers.items() if k in _KEPT_HEADERS}  # 405's Allow
        return EntryError(err.status, err.reason, headers=kept).answer()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        raise  # the client went away: nothing to answer (aiohttp logs it at debug)
    except aiohttp.ClientError as err:  # the upstream failed (a router or replica went away)
        log.warning("upstream failed on %s: %s", request.path, err)
        return EntryError(502, "The upstream failed to answer.").answer()
    except Exception:
        log.exception("unhandled error on %s", request.path)
        return EntryError(500, "Internal server error.").answer()


_KEPT_HEADERS = frozenset({"Allow", "Retry-After"})


# smg 1.13 answers these before any worker saw the request, so a retry is always safe: it
# registers a new gRPC worker's tokenizer shortly after the worker itself, and a router
# restarted (its process died) knows no worker, nor so the model, until the replica set
# registers them again. The entry knows the model exists; the router will shortly.
NOT_READY = frozenset(
    {(503, "tokenizer_not_ready"), (503, "no_available_workers"), (404, "model_not_found")}
)


def not_ready_yet(status: int, body: bytes) -> bool:
    """Whether a router's answer says it is still registering the model (retry shortly)."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and (status, error.get("code")) in NOT_READY


def _backoff() -> Iterator[float]:
    pause = 0.05
    while True:
        yield pause
        pause = min(pause * 2, 1.0)


class StreamFailedEarlyError(Exception):
    """A stream failed before its first event reached the client: it broke, ended empty, or
    opened with a server error (a replica that died before its first token). The client has
    seen nothing, not even a status, so the request may be sent again."""


async def relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    headers: Mapping[str, str] | None = None,
    *,
    may_resend: bool = False,
) -> web.StreamResponse:
    """The upstream's answer as the client's: a stream event by event, else whole. With
    `may_resend`, a stream that fails before its first event raises `StreamFailedEarlyError`."""
    if upstream.content_type == "text/event-stream":
        return await _stream(request, upstream, headers or {}, may_resend=may_resend)
    body = await upstream.read()
    content_type = upstream.content_type or "application/json"
    return web.Response(
        status=upstream.status, body=body, content_type=content_type,
        headers={**retry_after(upstream), **(headers or {})},
    )  # fmt: skip


# A relayed 429 or 503 without the upstream's own Retry-After gets this one (smg sends none
# when every worker of a revision is down); clients and the SDK back off by it.
RELAYED_RETRY_AFTER_S = 5


def retry_after(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    """The `Retry-After` to relay with the upstream's answer (none unless it is 429 or 503)."""
    if upstream.status not in (429, 503):
        return {}
    return {"Retry-After": upstream.headers.get("Retry-After", str(RELAYED_RETRY_AFTER_S))}


async def _stream(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    headers: Mapping[str, str],
    *,
    may_resend: bool,
) -> web.StreamResponse:
    events = _whole_events(upstream)
    # The client gets its status only with the first event, so a stream that fails before
    # one can still be sent again instead of reaching the client as an error.
    try:
        first = await anext(events, b"")
    except _BROKEN as err:
        if may_resend:
            raise StreamFailedEarlyError(str(err)) from err
        first = stream_error_event("The upstream closed the stream before answering.")
    if may_resend and (not first or _opens_with_server_error(first)):
        raise StreamFailedEarlyError(first[:200].decode(errors="replace"))
    response = web.StreamResponse(
        status=upstream.status,
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers},
    )
    await response.prepare(request)
    await response.write(first)
    try:
        async for whole in events:
            await response.write(whole)
    except _BROKEN as err:
        log.warning("upstream stream broke on %s: %s", request.path, err)
        await response.write(stream_error_event("The upstream closed the stream mid-way."))
    await response.write_eof()
    return response


# A stream that breaks, or stalls past the idle timeout (`upstream_timeout`): the client gets
# the error event and the end of the stream, never a second answer.
_BROKEN = (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ServerTimeoutError)

# An answer with no byte from upstream for this long is cut (a stalled replica or router must
# not hold a connection of the tenant's share for ever): the OpenAI SDK's own default timeout,
# after which its client has given up anyway (a whole answer sends its first byte when done).
# No answer takes longer than the total.
STREAM_IDLE_TIMEOUT_S = 600.0
ANSWER_TIMEOUT_S = 3600.0


def upstream_timeout(*, idle_s: float = STREAM_IDLE_TIMEOUT_S) -> aiohttp.ClientTimeout:
    """The timeout of an entry's requests to the routers."""
    return aiohttp.ClientTimeout(total=ANSWER_TIMEOUT_S, sock_connect=10, sock_read=idle_s)


async def _whole_events(upstream: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The stream cut at event ends, so the client never holds half an event if it breaks."""
    pending = b""
    async for chunk in upstream.content.iter_any():
        whole, pending = _split_events(pending + chunk)
        if whole:
            yield whole
    if pending:
        yield pending


def _opens_with_server_error(events: bytes) -> bool:
    """Whether the first event is an error of the server's (5xx or no code): a client error
    (400: the prompt is too long) would fail again, and is the client's to see."""
    first = events.splitlines()[0].removeprefix(b"data:").strip()
    try:
        error = json.loads(first).get("error")
    except (ValueError, AttributeError):
        return False
    if not isinstance(error, dict):
        return False
    code = error.get("code")
    return not isinstance(code, int) or code >= 500


EVENT_ENDS = (b"\n\n", b"\r\n\r\n")


def _split_events(data: bytes) -> tuple[bytes, bytes]:
    """`data` cut after its last complete server-sent event: (whole events, the rest)."""
    cut = max((data.rfind(end) + len(end) for end in EVENT_ENDS if end in data), default=0)
    return data[:cut], data[cut:]


def stream_error_event(message: str) -> bytes:
    """The error event and `[DONE]` that end a broken stream, as SGLang and smg end theirs: the
    client learns the answer is incomplete, and nothing is sent again (no token repeats)."""
    error = openai.error_body(502, message, code="stream_error")
    return f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request's JSON object body, or 400."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"Invalid JSON body: {err}") from None
    except RecursionError:  # was a 500 and a logged traceback
        raise ApiError(400, "Invalid JSON body: nested too deeply.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body
