"""The emulated SGLang replica's HTTP server (aiohttp), speaking sglang 0.5.23's interface.

Routes: /generate, /v1/completions, /v1/chat/completions (SSE streaming ending in [DONE]),
/v1/models, /health, /health_generate, /ready, /model_info, /server_info, /flush_cache,
/get_load, /v1/loads, /metrics; and, outside SGLang's interface,
/_radixfleet/{faults,crash,restart} to inject faults.
Every error answers SGLang's JSON error body; a crashed replica drops connections unanswered.

:class:`Emulator` is the app and the generation routes over the replica both servers share
(:mod:`radixfleet.emulator.served`); the other routes are :mod:`radixfleet.emulator.control`'s,
and streamed answers :mod:`radixfleet.emulator.streaming`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from radixfleet.emulator import answers, protocol
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.control import ControlRoutes
from radixfleet.emulator.driver import Ticket
from radixfleet.emulator.grpc_server import start_grpc
from radixfleet.emulator.http_io import drop, read_json
from radixfleet.emulator.protocol import ApiError, Job
from radixfleet.emulator.served import EmulatedReplica
from radixfleet.emulator.streaming import stream
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.replica import Health, Phase

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PREFIXES = ("/health", "/ready", "/metrics")  # SGLang lets these through without the key


class Emulator(EmulatedReplica):
    """One replica served: the aiohttp app (gRPC beside it) over the model, driver, tokenizer
    and metrics of :class:`~radixfleet.emulator.served.EmulatedReplica`."""

    def __init__(self, config: EmulatorConfig, *, tokenizer: EmulatorTokenizer | None = None):
        super().__init__(config, tokenizer=tokenizer)
        self.control = ControlRoutes(self)
        self.app = self._build_app()

    # -- app ---------------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        routes = [
            web.post("/generate", self.generate),
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.control.models),
            web.get("/health", self.control.health),
            web.get("/health_generate", self.control.health),
            web.get("/ready", self.control.ready),
            web.get("/model_info", self.control.model_info),
            web.get("/get_model_info", self.control.model_info),
            web.get("/server_info", self.control.server_info),
            web.get("/get_server_info", self.control.server_info),
            web.route("*", "/flush_cache", self.control.flush_cache),
            web.get("/get_load", self.control.get_load),
            web.get("/v1/loads", self.control.v1_loads),
            web.get("/_radixfleet/faults", self.control.get_faults),
            web.post("/_radixfleet/faults", self.control.set_faults),
            web.post("/_radixfleet/crash", self.control.crash),
            web.post("/_radixfleet/restart", self.control.restart),
        ]
        if self.config.enable_metrics:
            routes.append(web.get("/metrics", self.control.metrics))
        app.add_routes(routes)
        app.on_shutdown.append(self._on_shutdown)
        if self.config.grpc_port is not None:
            app.cleanup_ctx.append(self._grpc)
        if self.role is not None:
            app.cleanup_ctx.append(self.role.serving(self.config.host))
        return app

    async def _grpc(self, _app: web.Application) -> AsyncIterator[None]:
        """SGLang's gRPC protocol beside HTTP, for as long as the app runs."""
        assert self.config.grpc_port is not None
        server, self.grpc_port = await start_grpc(
            self, host=self.config.host, port=self.config.grpc_port
        )
        yield
        await server.stop(grace=1.0)

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.driver.close()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.model.health(self.driver.now()) is Health.CRASHED:
            return drop(request)
        response = await self._answer_or_error(request, handler)
        self.responses.count(
            endpoint=_endpoint(request), status=response.status, method=request.method
        )
        return response

    async def _answer_or_error(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            self._check_key(request)
            return await handler(request)
        except ApiError as err:
            return _error(err)
        except web.HTTPException as err:
            if err.status < 400:
                raise
            return _error(ApiError(err.status, err.reason))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("unhandled error on %s", request.path)
            return _error(ApiError(500, "Internal server error."))

    def _check_key(self, request: web.Request) -> None:
        key = self.config.api_key
        if key is None or request.path.startswith(OPEN_PREFIXES):
            return
        if request.headers.get("Authorization") != f"Bearer {key}":
            raise ApiError(401, "Unauthorized")

    # -- generation --------------------------------------------------------------------------

    # Parsing tokenizes the prompt, which takes seconds for a long one: it runs on a worker
    # thread, so /health and the requests in flight are answered meanwhile.

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's native /generate."""
        body = await read_json(request)
        job = await asyncio.to_thread(protocol.parse_generate, body, self.tokenizer)
        return await self._run(request, job, body)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """OpenAI /v1/completions."""
        body = await read_json(request)
        model, adapter = self._model(body)
        job = await asyncio.to_thread(
            protocol.parse_completion, body, self.tokenizer, model=model, adapter=adapter
        )
        return await self._run(request, job, body)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """OpenAI /v1/chat/completions."""
        body = await read_json(request)
        model, adapter = self._model(body)
        job = await asyncio.to_thread(
            protocol.parse_chat,
            body,
            self.tokenizer,
            model=model,
            context_length=self.config.profile.context_length,
            adapter=adapter,
        )
        return await self._run(request, job, body)

    def _model(self, body: dict[str, Any]) -> tuple[str, str | None]:
        """The served model a request names, and the LoRA adapter a `base:adapter` name adds."""
        name = body.get("model")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, f"Field 'model' has the wrong type: {type(name).__name__}.")
        accepted = {self.config.model_name, self.config.profile.model_path, "default"}
        if name is None or name in accepted or name == str(self.tokenizer.path):
            return self.config.model_name, None
        base, _, adapter = name.rpartition(":")
        if base in accepted and adapter:
            return self.config.model_name, adapter
        raise ApiError(404, f"The model '{name}' does not exist.")

    async def _run(
        self, request: web.Request, job: Job, body: dict[str, Any]
    ) -> web.StreamResponse:
        arrived, transferred = self.driver.now(), 0
        if self.role is not None:
            admitted = await self.role.admit(job, body)
            job, transferred = admitted.job, admitted.transferred_tokens
        jobs = await self.samples(job)
        tickets = self.submit_all(jobs, transferred_tokens=transferred)
        if self.role is not None:
            for ticket in tickets:
                self.role.started(ticket, admitted, arrived=arrived, done=self.wait_done)
        try:
            if job.stream:
                return await stream(self, request, jobs, tickets)
            await asyncio.gather(*(self.wait_done(ticket) for ticket in tickets))
            return self._answer(request, jobs, tickets)
        finally:
            for ticket in tickets:
                self.driver.release(ticket)

    def _answer(
        self, request: web.Request, jobs: list[Job], tickets: list[Ticket]
    ) -> web.StreamResponse:
        if any(ticket.request.phase is not Phase.FINISHED for ticket in tickets):
            return drop(request)  # aborted by a crash: the client sees the connection go
        samples = [self.finished(job, ticket) for job, ticket in zip(jobs, tickets, strict=True)]
        if jobs[0].kind == "generate":
            bodies = [
                answers.format_generate(
                    s.job, s.outcome, self.tokenizer, upto=len(s.job.answer_ids)
                )
                for s in samples
            ]
            return web.json_response(bodies if len(bodies) > 1 else bodies[0])
        format_body = answers.format_chat if jobs[0].kind == "chat" else answers.format_completion
        return web.json_response(format_body(samples, self.tokenizer))


def _error(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status)


def _endpoint(request: web.Request) -> str:
    """The route's path as SGLang's middleware labels it, "Unknown" for no route."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "Unknown"
