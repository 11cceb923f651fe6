"""The emulated replica's control routes: what it tells of itself (/v1/models, /model_info,
/server_info, /get_load, /v1/loads, /metrics), its health (/health, /health_generate, /ready),
/flush_cache, and, outside SGLang's interface, the faults injected into it
(/_radixfleet/{faults,crash,restart})."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from radixfleet import __version__
from radixfleet.emulator.http_io import read_json
from radixfleet.emulator.info import loads, model_info, models_list, server_info
from radixfleet.emulator.protocol import ApiError
from radixfleet.emulator.served import EmulatedReplica
from radixfleet.replica import Faults, Health

FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class ControlRoutes:
    """The handlers of every route but generation, over one replica (read through it at each
    call: the replica's config changes once its port is known)."""

    def __init__(self, replica: EmulatedReplica) -> None:
        self.replica = replica

    # -- information -------------------------------------------------------------------------

    async def models(self, _request: web.Request) -> web.StreamResponse:
        """OpenAI /v1/models: the served model and, as SGLang lists them, its loaded adapters."""
        adapters = self.replica.model.adapters(now=self.replica.driver.now())
        return web.json_response(models_list(self.replica.config, adapters=adapters))

    async def model_info(self, _request: web.Request) -> web.StreamResponse:
        """/model_info: model_path is the local tokenizer directory, for the gateway."""
        return web.json_response(
            model_info(self.replica.config, tokenizer_dir=self.replica.tokenizer.path)
        )

    async def server_info(self, _request: web.Request) -> web.StreamResponse:
        """/server_info: the server arguments and the scheduler's internal state."""
        stats = self.replica.model.stats(self.replica.driver.now())
        body = server_info(
            self.replica.config,
            tokenizer_dir=self.replica.tokenizer.path,
            stats=stats,
            version=__version__,
        )
        return web.json_response(body)

    async def get_load(self, _request: web.Request) -> web.StreamResponse:
        """/get_load: per data-parallel rank, the load the gateway's policies read."""
        stats = self.replica.model.stats(self.replica.driver.now())
        load = {
            "dp_rank": 0,
            "num_reqs": stats.num_running_reqs + stats.num_queue_reqs,
            "num_waiting_reqs": stats.num_queue_reqs,
            "num_tokens": stats.kv_used_tokens,
        }
        return web.json_response([load])

    async def v1_loads(self, _request: web.Request) -> web.StreamResponse:
        """/v1/loads: the load report smg polls for HTTP workers (what gRPC GetLoads answers)."""
        stats = self.replica.model.stats(self.replica.driver.now())
        limit = self.replica.config.profile.max_running_requests
        return web.json_response(loads(stats, max_running_requests=limit))

    async def metrics(self, _request: web.Request) -> web.StreamResponse:
        """Prometheus text exposition of the sglang:* families."""
        body = generate_latest(self.replica.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- health ------------------------------------------------------------------------------

    async def health(self, _request: web.Request) -> web.StreamResponse:
        """200 once warm and responsive; 503 while starting; a hang answers 503 at timeout."""
        self.replica.health_checks += 1
        deadline = self.replica.driver.now() + self.replica.config.health_timeout
        while True:
            state = self.replica.model.health(self.replica.driver.now())
            if state is Health.READY:
                return web.Response(status=200)
            if state is not Health.HUNG or self.replica.driver.now() >= deadline:
                return web.Response(status=503)
            await asyncio.sleep(min(0.05, max(deadline - self.replica.driver.now(), 0.0)))

    async def ready(self, _request: web.Request) -> web.StreamResponse:
        """200 when the replica takes traffic, else 503."""
        ok = self.replica.model.health(self.replica.driver.now()) is Health.READY
        return web.Response(status=200 if ok else 503)

    async def flush_cache(self, _request: web.Request) -> web.StreamResponse:
        """Drop the prefix cache when idle (SGLang's text answer)."""
        flushed = self.replica.model.flush_cache(now=self.replica.driver.now())
        return web.Response(status=200 if flushed else 400, text=FLUSH_TEXT)

    # -- faults ------------------------------------------------------------------------------

    async def get_faults(self, _request: web.Request) -> web.StreamResponse:
        """The faults in force and the health they lead to."""
        return web.json_response(self._faults_body())

    async def set_faults(self, request: web.Request) -> web.StreamResponse:
        """Replace the faults in force: {"hung", "slowdown", "error_rate"}."""
        body = await read_json(request)
        try:
            faults = Faults(
                hung=bool(body.get("hung", False)),
                slowdown=float(body.get("slowdown", 1.0)),
                error_rate=float(body.get("error_rate", 0.0)),
            )
        except (TypeError, ValueError) as err:
            raise ApiError(400, f"Invalid faults: {err}") from None
        self.replica.model.set_faults(faults, now=self.replica.driver.now())
        self.replica.driver.poke()
        return web.json_response(self._faults_body())

    async def crash(self, request: web.Request) -> web.StreamResponse:
        """Crash now; {"restart_after": seconds} restarts (with a cold start) after that."""
        body = await read_json(request) if request.can_read_body else {}
        after = body.get("restart_after")
        if after is not None and not isinstance(after, int | float):
            raise ApiError(400, "restart_after must be a number of seconds.")
        # Answer first, then crash: the caller learns the crash happened.
        asyncio.get_running_loop().call_soon(self._crash, None if after is None else float(after))
        return web.json_response({"crashed": True, "restart_after": after})

    def _crash(self, restart_after: float | None) -> None:
        self.replica.model.crash(now=self.replica.driver.now(), restart_after=restart_after)
        self.replica.driver.poke()

    async def restart(self, _request: web.Request) -> web.StreamResponse:
        """Restart the replica now (cold start included)."""
        self.replica.model.restart(now=self.replica.driver.now())
        self.replica.driver.poke()
        return web.json_response(self._faults_body())

    def _faults_body(self) -> dict[str, Any]:
        faults = self.replica.model.faults
        health = self.replica.model.health(self.replica.driver.now())
        return {
            "hung": faults.hung,
            "slowdown": faults.slowdown,
            "error_rate": faults.error_rate,
            "health": health.value,
        }
