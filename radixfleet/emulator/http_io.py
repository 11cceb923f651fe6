"""The emulator's HTTP edge, shared by its handlers (:mod:`radixfleet.emulator.server`,
:mod:`radixfleet.emulator.control`, :mod:`radixfleet.emulator.streaming`): a request's JSON body
read, and a connection dropped unanswered, as a dead process would."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from aiohttp import web

from radixfleet.emulator.protocol import ApiError


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or ApiError 400 for a body that is not one."""
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"Invalid JSON body: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def drop(request: web.Request) -> NoReturn:
    """Close the connection without an answer, as a dead process would."""
    if request.transport is not None:
        request.transport.abort()
    raise ConnectionResetError("replica crashed")
