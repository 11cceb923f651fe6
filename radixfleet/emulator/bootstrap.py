"""The handshake of SGLang's prefill/decode roles, as the emulated replicas speak it: a
request's bootstrap fields, the prefill's bootstrap server where decode replicas collect a
room's KV, and the decode side that waits for it.

smg in PD mode sends one request's body to a prefill and a decode replica at once, adding
`bootstrap_host`, `bootstrap_port` (the prefill's `--disaggregation-bootstrap-port`) and a random
`bootstrap_room`. SGLang's bootstrap server answers `/health` and `/route` (the prefill's ranks);
the KV itself moves between the engines (mooncake, nixl) on their own connections. The emulator
has no KV to move, so its bootstrap server has one more route, `/_radixfleet/rooms/{room}`, a long
poll that answers once the room's prefill has ended: the handshake and the transfer as the
decode side sees them. The decode side then waits the transfer time
(:func:`radixfleet.replica.disagg.transfer_seconds`); a room that never comes fails the request
with SGLang's 500 ("Decode transfer failed ...") after `room_timeout_s`, never hangs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from aiohttp import web

from radixfleet.emulator.protocol import ApiError
from radixfleet.profile import ReplicaProfile
from radixfleet.replica.disagg import (
    DEFAULT_BOOTSTRAP_PORT,
    DEFAULT_ROOM_TIMEOUT_S,
    DEFAULT_TRANSFER_BACKEND,
    TransferBackend,
    disaggregation_mode,
    kv_bytes,
    transfer_seconds,
)
from radixfleet.replica.disagg import transfer_backend as transfer_backend_of

Role = Literal["prefill", "decode"]
ROOMS_PATH = "/_radixfleet/rooms"
# A published room is kept this long for its decode peer, then forgotten (SGLang frees a
# room's KV once it is sent, or on its bootstrap timeout).
ROOM_TTL_S = 600.0


@dataclass(frozen=True)
class DisaggConfig:
    """A replica's P/D role and its flags (`--disaggregation-*`)."""

    mode: Role
    bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT
    transfer_backend: TransferBackend = DEFAULT_TRANSFER_BACKEND
    room_timeout_s: float = DEFAULT_ROOM_TIMEOUT_S


@dataclass(frozen=True)
class Bootstrap:
    """Where a request's KV comes from: the prefill's host and bootstrap port, and the room."""

    host: str
    port: int
    room: int


def disagg_config(
    *, mode: str | None, bootstrap_port: int | None, transfer_backend: str | None
) -> DisaggConfig | None:
    """A P/D role from SGLang's flags; None for `--disaggregation-mode null` (or none given).
    An unknown mode or backend raises ValueError naming the known ones."""
    if mode is None or disaggregation_mode(mode) == "null":
        return None
    role: Role = "prefill" if mode == "prefill" else "decode"
    return DisaggConfig(
        mode=role,
        bootstrap_port=DEFAULT_BOOTSTRAP_PORT if bootstrap_port is None else bootstrap_port,
        transfer_backend=transfer_backend_of(transfer_backend or DEFAULT_TRANSFER_BACKEND),
    )


def bootstrap_of(body: dict[str, Any], *, rid: str) -> Bootstrap:
    """The bootstrap fields smg added to `body`, or SGLang's 400 for a request without them."""
    room, host, port = (body.get(k) for k in ("bootstrap_room", "bootstrap_host", "bootstrap_port"))
    if room is None:
        raise ApiError(
            400,
            "Invalid request: Disaggregated request received without bootstrap room id. "
            f"req.rid={rid!r}",
        )
    if not isinstance(room, int) or isinstance(room, bool) or room < 0:
        raise ApiError(400, f"Field 'bootstrap_room' must be a non-negative integer, got {room!r}.")
    if not isinstance(host, str) or not host:
        raise ApiError(400, f"Field 'bootstrap_host' must be a host name, got {host!r}.")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ApiError(400, f"Field 'bootstrap_port' must be a TCP port, got {port!r}.")
    return Bootstrap(host, port, room)


# ---- what each role counts ------------------------------------------------------------------


@dataclass
class DisaggCounts:
    """What one role counts, read by :class:`DisaggCollector` at scrape time."""

    bootstrap_queue: int = 0  # prefill: requests whose room is not published yet
    inflight_queue: int = 0  # prefill: published rooms no decode has collected
    prealloc_queue: int = 0  # decode: waiting for the prefill's room
    transfer_queue: int = 0  # decode: the KV on its way
    bootstrap_failed: int = 0
    transfer_failed: int = 0


# ---- the prefill role ------------------------------------------------------------------------


class Rooms:
    """A prefill replica's rooms: each published with its prompt's length once prefilled."""

    def __init__(self) -> None:
        self._ready: dict[int, int] = {}
        self._published_at: dict[int, float] = {}
        self._events: dict[int, asyncio.Event] = {}

    def publish(self, room: int, *, prompt_tokens: int) -> None:
        """The room's KV is ready: wake every decode side waiting for it."""
        self._forget_old(now=time.monotonic())
        self._ready[room] = prompt_tokens
        self._published_at[room] = time.monotonic()
        self._events.pop(room, asyncio.Event()).set()

    async def wait(self, room: int, *, timeout_s: float) -> int | None:
        """The room's prompt length once it is ready, or None after `timeout_s`; the room is
        then collected (one decode peer per room, as smg pairs them)."""
        if room not in self._ready:
            event = self._events.setdefault(room, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), timeout_s)
            except TimeoutError:
                return None
        self._published_at.pop(room, None)
        return self._ready.pop(room, None)

    def __len__(self) -> int:
        return len(self._ready)

    def _forget_old(self, *, now: float) -> None:
        for room, at in list(self._published_at.items()):
            if now - at > ROOM_TTL_S:
                self._ready.pop(room, None)
                del self._published_at[room]


class BootstrapServer:
    """A prefill replica's bootstrap server: SGLang's `/health` and `/route`, and the rooms."""

    def __init__(
        self,
        *,
        config: DisaggConfig,
        profile: ReplicaProfile,
        counts: DisaggCounts,
        observe: Callable[[float, int], None],
    ) -> None:
        self.config, self.profile, self.counts = config, profile, counts
        self.rooms = Rooms()
        self._observe = observe
        self._runner: web.AppRunner | None = None
        self.port = config.bootstrap_port

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/health", self._health),
                web.get("/route", self._route),
                web.get(f"{ROOMS_PATH}/{{room}}", self._room),
            ]
        )
        return app

    async def start(self, host: str) -> None:
        """Listen on the configured bootstrap port (0: a free one, then `port` says which)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, self.config.bootstrap_port).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _route(self, _request: web.Request) -> web.Response:
        # What a decode rank asks first: the prefill's parallel layout (one rank here).
        return web.json_response(
            {"attn_tp_size": 1, "attn_cp_size": 1, "dp_size": 1, "pp_size": 1, "page_size": 1}
        )

    async def _room(self, request: web.Request) -> web.Response:
        try:
            room = int(request.match_info["room"])
            timeout_s = float(request.query.get("timeout", self.config.room_timeout_s))
        except ValueError:
            return web.json_response({"error": "room and timeout must be numbers"}, status=400)
        tokens = await self.rooms.wait(room, timeout_s=timeout_s)
        if tokens is None:
            return web.json_response({"error": f"room {room} not prefilled"}, status=404)
        self.counts.inflight_queue = len(self.rooms)
        seconds, sent = transfer_seconds(self.profile, tokens), kv_bytes(self.profile, tokens)
        self._observe(seconds, sent)
        return web.json_response({"prompt_tokens": tokens, "seconds": seconds, "bytes": sent})

    def published(self, room: int, *, prompt_tokens: int) -> None:
        """A request's prefill ended: its room waits for its decode peer."""
        self.rooms.publish(room, prompt_tokens=prompt_tokens)
        self.counts.inflight_queue = len(self.rooms)


# ---- the decode role -------------------------------------------------------------------------


async def receive(
    bootstrap: Bootstrap,
    *,
    rid: str,
    config: DisaggConfig,
    profile: ReplicaProfile,
    counts: DisaggCounts,
) -> int:
    """Wait for the room at the prefill's bootstrap server, then for the transfer; return the
    prompt tokens received, or raise SGLang's 500 for a room that did not come."""
    counts.prealloc_queue += 1
    try:
        tokens = await _collect(bootstrap, config=config)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        counts.bootstrap_failed += 1
        raise ApiError(500, _failed(rid, bootstrap, f"with exception {err!r}")) from None
    finally:
        counts.prealloc_queue -= 1
    if tokens is None:
        counts.transfer_failed += 1
        why = f"with exception KV not ready within {config.room_timeout_s:.0f} s"
        raise ApiError(500, _failed(rid, bootstrap, why))
    counts.transfer_queue += 1
    try:
        await asyncio.sleep(transfer_seconds(profile, tokens))
    finally:
        counts.transfer_queue -= 1
    return tokens


async def _collect(bootstrap: Bootstrap, *, config: DisaggConfig) -> int | None:
    url = f"http://{bootstrap.host}:{bootstrap.port}{ROOMS_PATH}/{bootstrap.room}"
    # The client's own limit outlives the server's long poll, so the server answers first.
    limit = aiohttp.ClientTimeout(total=config.room_timeout_s + 10.0)
    params = {"timeout": str(config.room_timeout_s)}
    async with (
        aiohttp.ClientSession(timeout=limit) as session,
        session.get(url, params=params) as answer,
    ):
        if answer.status == 404:
            return None
        answer.raise_for_status()
        body = await answer.json()
    tokens = body.get("prompt_tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, int):
        raise ValueError(f"bootstrap server answered {body!r}")
    return tokens


def _failed(rid: str, bootstrap: Bootstrap, why: str) -> str:
    return (
        f"Decode transfer failed for request rank=0 decode_req.req.rid={rid!r} "
        f"decode_req.req.bootstrap_room={bootstrap.room} {why}"
    )
