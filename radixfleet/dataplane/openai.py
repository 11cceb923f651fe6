"""The OpenAI surface both region entries answer with, where clients depend on its shape.

- **Errors** as OpenAI's API and smg give them: `{"error": {"message", "type", "param", "code"}}`
  with `code` a string or null. The official SDK, and clients generated from OpenAI's schema,
  parse exactly this; SGLang's own shape (an integer `code`) is the replicas' and stays theirs.
- **Model objects** with `id`, `object`, `created` and `owned_by`, the four fields OpenAI's
  schema requires (a strictly typed client refused the list without `created`).
- **Request ids**: a client's `x-request-id` (if it is a sane one) is kept, else one is made; it
  goes upstream to the router and comes back on every answer, errors included, so one id
  follows a request through the entry, smg and the logs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

REQUEST_ID = "x-request-id"
REQUEST_ID_KEY = web.RequestKey("radixfleet.request_id", str)
# Ids of other systems pass through (UUIDs, `req_...`); anything longer or stranger is replaced,
# so a client cannot write arbitrary text into the logs and the routers' headers.
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

# OpenAI's error `type` and default `code` by status.
_KINDS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
    502: ("server_error", "upstream_error"),
    503: ("server_error", "service_unavailable"),
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_body(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body for an answer of `status`; `code` defaults by status."""
    kind, default_code = _KINDS.get(status, ("server_error", "internal_error"))
    if status < 500 and status not in _KINDS:
        kind, default_code = "invalid_request_error", None
    return {"error": {"message": message, "type": kind, "param": param,
                      "code": code or default_code}}  # fmt: skip


def model_object(model_id: str, *, created: int, owned_by: str) -> dict[str, Any]:
    """One entry of `GET /v1/models`, and the answer of `GET /v1/models/{id}`."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}


def install_request_ids(app: web.Application) -> None:
    """Give every request an id (the client's, if sane) and every answer its header."""
    app.middlewares.insert(0, _request_ids)
    app.on_response_prepare.append(_echo_request_id)


def request_id(request: web.Request) -> str:
    """The id of `request` (made by the middleware; a fresh one outside it)."""
    return request.get(REQUEST_ID_KEY) or _new_id()


@web.middleware
async def _request_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.headers.get(REQUEST_ID, "")
    request[REQUEST_ID_KEY] = given if _SANE_ID.match(given) else _new_id()
    return await handler(request)


async def _echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[REQUEST_ID] = request_id(request)


def _new_id() -> str:
    return f"req_{uuid.uuid4().hex}"
