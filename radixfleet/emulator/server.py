"""The emulated SGLang replica's HTTP server (aiohttp), speaking sglang 0.5.23's interface.

Routes: /generate, /v1/completions, /v1/chat/completions (SSE streaming ending in [DONE]),
/v1/models, /health, /health_generate, /ready, /model_info, /server_info, /flush_cache,
/get_load, /v1/loads, /metrics; and, outside SGLang's interface,
/_radixfleet/{faults,crash,restart} to inject faults.
Every error answers SGLang's JSON error body; a crashed replica drops connections unanswered.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from radixfleet import __version__
from radixfleet.emulator import answers, protocol
from radixfleet.emulator.answers import Outcome, Sample
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.driver import Driver, Ticket, each_change
from radixfleet.emulator.grpc_server import start_grpc
from radixfleet.emulator.info import loads, model_info, models_list, server_info
from radixfleet.emulator.metrics import build_registry
from radixfleet.emulator.protocol import ApiError, Job
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.replica import (
    Faults,
    Health,
    MonotonicClock,
    Phase,
    RejectedError,
    ReplicaModel,
    RequestSpec,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PREFIXES = ("/health", "/ready", "/metrics")  # SGLang lets these through without the key
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class Emulator:
    """One replica: the model, its real-time driver, the tokenizer and the aiohttp app."""

    def __init__(self, config: EmulatorConfig, *, tokenizer: EmulatorTokenizer | None = None):
        self.config = config
        self.tokenizer = tokenizer or load_tokenizer(config.cache_dir)
        clock = MonotonicClock()
        self.model = ReplicaModel(
            profile=config.profile,
            now=clock.now(),
            block_tokens=config.block_tokens,
            schedule_policy=config.schedule_policy,
            warm=config.warm,
            seed=config.seed,
        )
        self.driver = Driver(self.model, clock=clock, stream_interval=config.stream_interval)
        metrics = build_registry(
            stats=lambda: self.model.stats(self.driver.now()),
            profile=config.profile,
            model_name=config.model_name,
        )
        self.registry, self.histograms, self.responses = (
            metrics.registry, metrics.histograms, metrics.responses,
        )  # fmt: skip
        self.health_checks = 0  # answered /health and /health_generate probes, for tests
        self.grpc_port: int | None = None  # where gRPC listens, once started
        self.app = self._build_app()

    # -- app ---------------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        routes = [
            web.post("/generate", self.generate),
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
            web.get("/health", self.health),
            web.get("/health_generate", self.health),
            web.get("/ready", self.ready),
            web.get("/model_info", self.model_info),
            web.get("/get_model_info", self.model_info),
            web.get("/server_info", self.server_info),
            web.get("/get_server_info", self.server_info),
            web.route("*", "/flush_cache", self.flush_cache),
            web.get("/get_load", self.get_load),
            web.get("/v1/loads", self.v1_loads),
            web.get("/_radixfleet/faults", self.get_faults),
            web.post("/_radixfleet/faults", self.set_faults),
            web.post("/_radixfleet/crash", self.crash),
            web.post("/_radixfleet/restart", self.restart),
        ]
        if self.config.enable_metrics:
            routes.append(web.get("/metrics", self.metrics))
        app.add_routes(routes)
        app.on_shutdown.append(self._on_shutdown)
        if self.config.grpc_port is not None:
            app.cleanup_ctx.append(self._grpc)
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
            return _drop(request)
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
        body = await _json(request)
        job = await asyncio.to_thread(protocol.parse_generate, body, self.tokenizer)
        return await self._run(request, job)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """OpenAI /v1/completions."""
        body = await _json(request)
        model, adapter = self._model(body)
        job = await asyncio.to_thread(
            protocol.parse_completion, body, self.tokenizer, model=model, adapter=adapter
        )
        return await self._run(request, job)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """OpenAI /v1/chat/completions."""
        body = await _json(request)
        model, adapter = self._model(body)
        job = await asyncio.to_thread(
            protocol.parse_chat,
            body,
            self.tokenizer,
            model=model,
            context_length=self.config.profile.context_length,
            adapter=adapter,
        )
        return await self._run(request, job)

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

    def submit(self, job: Job) -> Ticket:
        answer = job.generated_ids()
        block = self.config.block_tokens
        self._check_adapter(job.namespace)
        spec = RequestSpec(
            rid=job.rid,
            prompt_tokens=len(job.prompt_ids),
            output_tokens=max(1, job.completion_tokens),
            max_new_tokens=max(1, job.max_new_tokens),
            prompt_blocks=protocol.block_keys(job.prompt_ids, block, job.namespace),
            finish_blocks=protocol.block_keys(job.prompt_ids + answer, block, job.namespace),
        )
        if self.model.get(job.rid) is not None:
            raise ApiError(400, f"Duplicate request id {job.rid}.")
        try:
            return self.driver.submit(spec, streaming=job.stream)
        except RejectedError as err:
            raise ApiError(err.reason.status, err.message) from None

    def _check_adapter(self, namespace: protocol.CacheNamespace | None) -> None:
        lora = None if namespace is None else namespace.lora
        if lora is None or lora in self.config.lora_adapters:
            return
        if not self.config.lora_adapters:
            raise ApiError(400, "LoRA is not enabled: start the server with --lora-paths.")
        raise ApiError(400, f"The LoRA adapter '{lora}' is not loaded.")

    async def _run(self, request: web.Request, job: Job) -> web.StreamResponse:
        jobs = await self.samples(job)
        tickets = self.submit_all(jobs)
        try:
            if job.stream:
                return await self._stream(request, jobs, tickets)
            await asyncio.gather(*(self.wait_done(ticket) for ticket in tickets))
            return self._answer(request, jobs, tickets)
        finally:
            for ticket in tickets:
                self.driver.release(ticket)

    async def samples(self, job: Job) -> list[Job]:
        """The request's `n` samples (`protocol.samples`): beyond the first, each is answered
        afresh, tokenizer work done off the event loop."""
        if job.samples == 1:
            return [job]
        return await asyncio.to_thread(protocol.samples, job, self.tokenizer)

    def submit_all(self, jobs: list[Job]) -> list[Ticket]:
        """Queue every sample, or none: one refused releases those already queued."""
        tickets: list[Ticket] = []
        try:
            for job in jobs:
                tickets.append(self.submit(job))
        except ApiError:
            for ticket in tickets:
                self.driver.release(ticket)
            raise
        return tickets

    async def wait_done(self, ticket: Ticket) -> None:
        while not ticket.request.done:
            await ticket.changed.wait()
            ticket.changed.clear()

    def outcome(self, ticket: Ticket) -> Outcome:
        request = ticket.request
        finished = request.phase is Phase.FINISHED
        tokens = self.driver.generated(ticket)
        return Outcome(
            completion_tokens=tokens,
            cached_tokens=request.cached_tokens,
            finished=finished,
            e2e_latency=request.e2e_latency or 0.0,
        )

    def _answer(
        self, request: web.Request, jobs: list[Job], tickets: list[Ticket]
    ) -> web.StreamResponse:
        if any(ticket.request.phase is not Phase.FINISHED for ticket in tickets):
            return _drop(request)  # aborted by a crash: the client sees the connection go
        samples = [self._finished(job, ticket) for job, ticket in zip(jobs, tickets, strict=True)]
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

    def _finished(self, job: Job, ticket: Ticket) -> Sample:
        self.histograms.observe(ticket.request)
        return Sample(job, self.final_outcome(job, ticket))

    def final_outcome(self, job: Job, ticket: Ticket) -> Outcome:
        outcome = self.outcome(ticket)
        # The model runs at least one step even for max_new_tokens=0; report what was asked.
        return Outcome(
            completion_tokens=job.completion_tokens,
            cached_tokens=outcome.cached_tokens,
            finished=True,
            e2e_latency=outcome.e2e_latency,
        )

    # -- streaming ---------------------------------------------------------------------------

    async def _stream(
        self, request: web.Request, jobs: list[Job], tickets: list[Ticket]
    ) -> web.StreamResponse:
        """Each sample's tokens as they come (chunks carry the sample's index), its end when it
        ends, and, once every sample has ended, the usage and [DONE]."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if jobs[0].kind == "chat":
            for job in jobs:
                await _send(response, answers.stream_chunk(job, self.tokenizer, start=0, end=0,
                                                           role=True))  # fmt: skip
        sent = [0] * len(jobs)
        ended: dict[int, Sample] = {}
        async for i, done in each_change(tickets):
            job, ticket = jobs[i], tickets[i]
            if done and ticket.request.phase is not Phase.FINISHED:
                return _drop(request)
            upto = min(self.driver.generated(ticket), len(job.answer_ids))
            if upto > sent[i] or done:
                await self._send_progress(response, job, ticket, sent=sent[i], upto=upto)
                sent[i] = upto
            if done:
                ended[i] = await self._send_end(response, job, ticket)
        await self._send_tail(response, [ended[i] for i in range(len(jobs))])
        return response

    async def _send_progress(
        self, response: web.StreamResponse, job: Job, ticket: Ticket, *, sent: int, upto: int
    ) -> None:
        if job.kind == "generate":
            outcome = self.outcome(ticket)
            upto = len(job.answer_ids) if outcome.finished else upto
            await _send(response, answers.format_generate(job, outcome, self.tokenizer, upto=upto))
            return
        if upto > sent:
            await _send(response, answers.stream_chunk(job, self.tokenizer, start=sent, end=upto))

    async def _send_end(self, response: web.StreamResponse, job: Job, ticket: Ticket) -> Sample:
        """A sample's last chunk: its finish reason (OpenAI routes)."""
        sample = self._finished(job, ticket)
        if job.kind != "generate":
            reason = answers.finish_reason(job, sample.outcome)
            end = len(job.answer_ids)
            chunk = answers.stream_chunk(job, self.tokenizer, start=end, end=end, reason=reason)
            await _send(response, chunk)
        return sample

    async def _send_tail(self, response: web.StreamResponse, samples: list[Sample]) -> None:
        first = samples[0].job
        if first.kind != "generate" and first.include_usage:
            await _send(response, answers.usage_chunk(samples))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()

    # -- information -------------------------------------------------------------------------

    async def models(self, _request: web.Request) -> web.StreamResponse:
        """OpenAI /v1/models."""
        return web.json_response(models_list(self.config))

    async def model_info(self, _request: web.Request) -> web.StreamResponse:
        """/model_info: model_path is the local tokenizer directory, for the gateway."""
        return web.json_response(model_info(self.config, tokenizer_dir=self.tokenizer.path))

    async def server_info(self, _request: web.Request) -> web.StreamResponse:
        """/server_info: the server arguments and the scheduler's internal state."""
        stats = self.model.stats(self.driver.now())
        body = server_info(
            self.config, tokenizer_dir=self.tokenizer.path, stats=stats, version=__version__
        )
        return web.json_response(body)

    async def get_load(self, _request: web.Request) -> web.StreamResponse:
        """/get_load: per data-parallel rank, the load the gateway's policies read."""
        stats = self.model.stats(self.driver.now())
        load = {
            "dp_rank": 0,
            "num_reqs": stats.num_running_reqs + stats.num_queue_reqs,
            "num_waiting_reqs": stats.num_queue_reqs,
            "num_tokens": stats.kv_used_tokens,
        }
        return web.json_response([load])

    async def v1_loads(self, _request: web.Request) -> web.StreamResponse:
        """/v1/loads: the load report smg polls for HTTP workers (what gRPC GetLoads answers)."""
        stats = self.model.stats(self.driver.now())
        limit = self.config.profile.max_running_requests
        return web.json_response(loads(stats, max_running_requests=limit))

    async def metrics(self, _request: web.Request) -> web.StreamResponse:
        """Prometheus text exposition of the sglang:* families."""
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- health ------------------------------------------------------------------------------

    async def health(self, _request: web.Request) -> web.StreamResponse:
        """200 once warm and responsive; 503 while starting; a hang answers 503 at timeout."""
        self.health_checks += 1
        deadline = self.driver.now() + self.config.health_timeout
        while True:
            state = self.model.health(self.driver.now())
            if state is Health.READY:
                return web.Response(status=200)
            if state is not Health.HUNG or self.driver.now() >= deadline:
                return web.Response(status=503)
            await asyncio.sleep(min(0.05, max(deadline - self.driver.now(), 0.0)))

    async def ready(self, _request: web.Request) -> web.StreamResponse:
        """200 when the replica takes traffic, else 503."""
        ok = self.model.health(self.driver.now()) is Health.READY
        return web.Response(status=200 if ok else 503)

    async def flush_cache(self, _request: web.Request) -> web.StreamResponse:
        """Drop the prefix cache when idle (SGLang's text answer)."""
        flushed = self.model.flush_cache(now=self.driver.now())
        return web.Response(status=200 if flushed else 400, text=FLUSH_TEXT)

    # -- faults ------------------------------------------------------------------------------

    async def get_faults(self, _request: web.Request) -> web.StreamResponse:
        """The faults in force and the health they lead to."""
        return web.json_response(self._faults_body())

    async def set_faults(self, request: web.Request) -> web.StreamResponse:
        """Replace the faults in force: {"hung", "slowdown", "error_rate"}."""
        body = await _json(request)
        try:
            faults = Faults(
                hung=bool(body.get("hung", False)),
                slowdown=float(body.get("slowdown", 1.0)),
                error_rate=float(body.get("error_rate", 0.0)),
            )
        except (TypeError, ValueError) as err:
            raise ApiError(400, f"Invalid faults: {err}") from None
        self.model.set_faults(faults, now=self.driver.now())
        self.driver.poke()
        return web.json_response(self._faults_body())

    async def crash(self, request: web.Request) -> web.StreamResponse:
        """Crash now; {"restart_after": seconds} restarts (with a cold start) after that."""
        body = await _json(request) if request.can_read_body else {}
        after = body.get("restart_after")
        if after is not None and not isinstance(after, int | float):
            raise ApiError(400, "restart_after must be a number of seconds.")
        # Answer first, then crash: the caller learns the crash happened.
        asyncio.get_running_loop().call_soon(self._crash, None if after is None else float(after))
        return web.json_response({"crashed": True, "restart_after": after})

    def _crash(self, restart_after: float | None) -> None:
        self.model.crash(now=self.driver.now(), restart_after=restart_after)
        self.driver.poke()

    async def restart(self, _request: web.Request) -> web.StreamResponse:
        """Restart the replica now (cold start included)."""
        self.model.restart(now=self.driver.now())
        self.driver.poke()
        return web.json_response(self._faults_body())

    def _faults_body(self) -> dict[str, Any]:
        faults = self.model.faults
        health = self.model.health(self.driver.now())
        return {
            "hung": faults.hung,
            "slowdown": faults.slowdown,
            "error_rate": faults.error_rate,
            "health": health.value,
        }


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"Invalid JSON body: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


async def _send(response: web.StreamResponse, chunk: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")


def _error(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status)


def _endpoint(request: web.Request) -> str:
    """The route's path as SGLang's middleware labels it, "Unknown" for no route."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "Unknown"


def _drop(request: web.Request) -> NoReturn:
    """Close the connection without an answer, as a dead process would."""
    if request.transport is not None:
        request.transport.abort()
    raise ConnectionResetError("replica crashed")
