"""What both region entries do with a request once it is routed: the aiohttp application and
runner they start from, their error middleware, and the relay of an upstream's answer to the
client (a stream event by event, cut at event ends; an early failure sent again once; a broken
stream ended with an error event and `[DONE]`; idle and total timeouts).

The cluster's entry (radixfleet/entry/) and the local fleet's (radixfleet/localfleet/entry.py)
differ only in how they find a request's upstream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.log import access_logger

from radixfleet.dataplane import openai
from radixfleet.dataplane.errors import EntryError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The generation paths both entries route (OpenAI chat and completions, SGLang's native one).
PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")


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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as its status and OpenAI's JSON body (`openai.py`), never a traceback."""
    try:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise EntryError(413, f"The request body is larger than {MAX_BODY_BYTES} bytes.")
        return await handler(request)
    except EntryError as err:
        return err.answer()
    except web.HTTPException as err:
        if err.status < 400:
            raise
        kept = {k: v for k, v in err.headers.items() if k in _KEPT_HEADERS}  # 405's Allow
        return EntryError(err.status, err.reason, headers=kept).answer()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        raise  # the client went away: nothing to answer (aiohttp logs it at debug)
    except aiohttp.ClientError as err:  # the upstream failed (a router or replica went away)
        log.warning("upstream failed on %s: %s", request.path, err)
        # The class only (never its text, which names the cluster's Services): enough to tell
        # a reset from a closed connection when a client reports it.
        return EntryError(502, f"The upstream failed to answer ({type(err).__name__}).").answer()
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


class StreamFailedEarlyError(Exception):
    """A stream failed before its first event reached the client: it broke, ended empty, or
    opened with a server error (a replica that died before its first token). The client has
    seen nothing, not even a status, so the request may be sent again."""


# The request reached no upstream: the connection was refused (no pod behind the address yet),
# or never completed (a SYN dropped: an address whose pod is gone, a pod the network does not
# reach yet). Another upstream, or the same one a moment later, is safe.
NOT_REACHED: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)


# The upstream failed before the client saw a byte of its answer, so sending the request once
# more repeats nothing the client saw: the router closed the connection (its pod replaced or
# parked) or reset it (a kept-alive connection it closed as the request went out: the kernel
# answers with a reset), cut a whole answer short, or a stream failed before its first event.
# A request that reached no upstream (`NOT_REACHED`; a refused connection is a `ClientOSError`
# too) is each entry's to handle before these.
FAILED_BEFORE_ANSWERING: tuple[type[Exception], ...] = (
    StreamFailedEarlyError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    aiohttp.ClientPayloadError,
)


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
# the error event and the end of the stream, never a second answer. aiohttp reports a reset in
# the middle of a body as a payload error; a bare reset (`ClientOSError`) is here too, so that
# no failure after the first event can reach the entries' resend (FAILED_BEFORE_ANSWERING).
_BROKEN = (
    aiohttp.ClientPayloadError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ServerTimeoutError,
    aiohttp.ClientOSError,
)


# An answer with no byte from upstream for this long is cut (a stalled replica or router must
# not hold a connection of the tenant's share for ever): the OpenAI SDK's own default timeout,
# after which its client has given up anyway (a whole answer sends its first byte when done).
# No answer takes longer than the total.
STREAM_IDLE_TIMEOUT_S = 600.0


ANSWER_TIMEOUT_S = 3600.0


# A router is one hop inside the cluster, where a connection is made in well under a
# millisecond: one not made in 3 s (its SYN sent twice) is to an address whose pod is gone or
# not wired yet, and the request goes the Knative way (NOT_REACHED) instead of waiting longer.
ROUTER_CONNECT_TIMEOUT_S = 3.0


def upstream_timeout(*, idle_s: float = STREAM_IDLE_TIMEOUT_S) -> aiohttp.ClientTimeout:
    """The timeout of an entry's requests to the routers."""
    return aiohttp.ClientTimeout(
        total=ANSWER_TIMEOUT_S, sock_connect=ROUTER_CONNECT_TIMEOUT_S, sock_read=idle_s
    )


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
        raise EntryError(400, f"Invalid JSON body: {err}") from None
    except RecursionError:  # was a 500 and a logged traceback
        raise EntryError(400, "Invalid JSON body: nested too deeply.") from None
    if not isinstance(body, dict):
        raise EntryError(400, "The request body must be a JSON object.")
    return body
