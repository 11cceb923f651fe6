"""The emulated replica's gRPC server: SGLang's scheduler protocol as smg-grpc-proto defines it.

sglang 0.5.23 serves this protocol with `--smg-grpc-mode` (smg-grpc-servicer): the gateway
tokenizes, sends token ids to `Generate` and reads token ids back, and follows the replica's
cache through `SubscribeKvEvents`. The emulator serves it on `--grpc-port`, beside its HTTP
interface (which keeps /metrics, /health and the fault hooks), over the same model: a request
sent either way shares one queue, one batch and one radix cache.

Served: Generate (whole or streamed), HealthCheck, GetModelInfo, GetServerInfo, GetLoads,
GetTokenizer (the tokenizer directory as a zip), SubscribeKvEvents (kv_events.py), Abort and
FlushCache. Bad input answers INVALID_ARGUMENT with SGLang's message, never a traceback; a
crashed replica answers UNAVAILABLE. Tokenizing is the gateway's work, so no call here blocks
the event loop for long.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from google.protobuf import json_format, struct_pb2
from smg_grpc_proto.generated import common_pb2 as common
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as pb_grpc

from radixfleet import __version__
from radixfleet.emulator import answers, logprobs, protocol
from radixfleet.emulator.driver import each_change
from radixfleet.emulator.info import SGLANG_VERSION, loads, server_info
from radixfleet.emulator.kv_events import KvEventLog
from radixfleet.emulator.protocol import ApiError, Job
from radixfleet.replica import Health, Phase

if TYPE_CHECKING:
    from radixfleet.emulator.answers import Outcome
    from radixfleet.emulator.config import EmulatorConfig
    from radixfleet.emulator.driver import Driver, Ticket
    from radixfleet.emulator.metrics import RequestHistograms
    from radixfleet.emulator.tokenizer import EmulatorTokenizer
    from radixfleet.replica import ReplicaModel

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]

TOKENIZER_CHUNK_BYTES = 1 << 20
_STATUS_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


class ServedReplica(Protocol):
    """What the gRPC server uses of the replica it serves (radixfleet/emulator/served.py's
    `EmulatedReplica`, as the `Emulator` that starts it): a port, so this module does not
    import the server."""

    config: EmulatorConfig
    tokenizer: EmulatorTokenizer
    model: ReplicaModel
    driver: Driver
    histograms: RequestHistograms
    health_checks: int

    async def samples(self, job: Job) -> list[Job]: ...

    def submit_all(self, jobs: list[Job]) -> list[Ticket]: ...

    def final_outcome(self, job: Job, ticket: Ticket) -> Outcome: ...


class SchedulerServicer(pb_grpc.SglangSchedulerServicer):
    """SGLang's scheduler service over one emulated replica."""

    def __init__(self, emulator: ServedReplica) -> None:
        self.emulator = emulator
        self.kv_events = KvEventLog(emulator.model)

    # -- generation --------------------------------------------------------------------------

    async def Generate(  # noqa: N802 (the protocol's name)
        self, request: pb.GenerateRequest, context: Context
    ) -> AsyncIterator[pb.GenerateResponse]:
        """One generation, or `n` of them (each response carries its sample's index): chunks of
        new token ids while streaming, then each sample's complete answer."""
        await self._admit(context)
        jobs, tickets = await self._submit(request, context)
        try:
            sent = [0] * len(jobs)
            async for i, done in each_change(tickets):
                job, ticket = jobs[i], tickets[i]
                if done and ticket.request.phase is not Phase.FINISHED:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "The request was aborted.")
                upto = job.completion_tokens if done else self._generated(job, ticket)
                # smg builds a stream's text from the chunks alone: the last tokens go in one.
                if request.stream and upto > sent[i]:
                    yield self._chunk(job, ticket, sent=sent[i], upto=upto)
                    sent[i] = upto
                if done:
                    yield self._complete(job, ticket)
        finally:
            for ticket in tickets:
                self.emulator.driver.release(ticket)

    def _generated(self, job: Job, ticket: Ticket) -> int:
        return min(self.emulator.driver.generated(ticket), job.completion_tokens)

    async def _submit(
        self, request: pb.GenerateRequest, context: Context
    ) -> tuple[list[Job], list[Ticket]]:
        """Judge the request as /generate would (one parser for both) and queue its samples."""
        body = _generate_body(request)
        tokenizer = self.emulator.tokenizer
        try:
            job = await asyncio.to_thread(protocol.parse_generate, body, tokenizer)
            jobs = await self.emulator.samples(job)
            return jobs, self.emulator.submit_all(jobs)
        except ApiError as err:
            code = _STATUS_CODES.get(err.status, grpc.StatusCode.INTERNAL)
            await context.abort(code, err.message)
            raise  # abort raises; this line is for the type checker

    def _chunk(self, job: Job, ticket: Ticket, *, sent: int, upto: int) -> pb.GenerateResponse:
        chunk = pb.GenerateStreamChunk(
            token_ids=_counted_ids(job)[sent:upto],
            prompt_tokens=len(job.prompt_ids),
            completion_tokens=upto,
            cached_tokens=ticket.request.cached_tokens,
            index=job.index,
        )
        if job.top_logprobs is not None:
            chunk.output_logprobs.CopyFrom(self._logprobs(job, start=sent, end=upto))
        return pb.GenerateResponse(request_id=job.request_id, chunk=chunk)

    def _complete(self, job: Job, ticket: Ticket) -> pb.GenerateResponse:
        self.emulator.histograms.observe(ticket.request)
        outcome = self.emulator.final_outcome(job, ticket)
        complete = pb.GenerateComplete(
            output_ids=_counted_ids(job),
            finish_reason=answers.finish_reason(job, outcome) or "stop",
            prompt_tokens=len(job.prompt_ids),
            completion_tokens=outcome.completion_tokens,
            cached_tokens=outcome.cached_tokens,
            index=job.index,
        )
        if isinstance(job.matched_stop, int):
            complete.matched_token_id = job.matched_stop
        elif isinstance(job.matched_stop, str):  # smg trims it from the text, as SGLang does
            complete.matched_stop_str = job.matched_stop
        if job.top_logprobs is not None:
            ids = _counted_ids(job)
            complete.output_logprobs.CopyFrom(self._logprobs(job, start=0, end=len(ids)))
        return pb.GenerateResponse(request_id=job.request_id, complete=complete)

    def _logprobs(self, job: Job, *, start: int, end: int) -> pb.OutputLogProbs:
        """The log probabilities of the counted tokens [start, end), as SGLang's servicer sends
        them: one value and id per token, and its alternatives."""
        found = logprobs.values(_counted_ids(job)[start:end], self.emulator.tokenizer,
                                top=job.top_logprobs or 0, start=start)  # fmt: skip
        return pb.OutputLogProbs(
            token_logprobs=[t.logprob for t in found],
            token_ids=[t.token_id for t in found],
            top_logprobs=[
                pb.TopLogProbs(values=[lp for _, lp in t.top], token_ids=[i for i, _ in t.top])
                for t in found
            ],
        )

    async def Abort(  # noqa: N802
        self, request: pb.AbortRequest, context: Context
    ) -> pb.AbortResponse:
        """Abort a running request by id; an unknown id is already gone."""
        model, now = self.emulator.model, self.emulator.driver.now()
        found = model.get(request.request_id) is not None
        if found:
            model.abort(request.request_id, now=now)
            self.emulator.driver.poke()
        return pb.AbortResponse(success=found, message="" if found else "no such request")

    # -- health and information --------------------------------------------------------------

    async def HealthCheck(  # noqa: N802
        self, request: pb.HealthCheckRequest, context: Context
    ) -> pb.HealthCheckResponse:
        """Healthy once warm and responsive (the HTTP /health answer, as a field)."""
        await self._admit(context)
        state = self.emulator.model.health(self.emulator.driver.now())
        self.emulator.health_checks += 1
        return pb.HealthCheckResponse(healthy=state is Health.READY, message=state.value)

    async def GetModelInfo(  # noqa: N802
        self, request: pb.GetModelInfoRequest, context: Context
    ) -> pb.GetModelInfoResponse:
        """The model: paths point at the local tokenizer, as /model_info's do."""
        config, tokenizer = self.emulator.config, self.emulator.tokenizer
        profile = config.profile
        return pb.GetModelInfoResponse(
            model_path=str(tokenizer.path),
            tokenizer_path=str(tokenizer.path),
            is_generation=True,
            weight_version="default",
            served_model_name=config.model_name,
            max_context_length=profile.context_length,
            vocab_size=tokenizer.tokenizer.get_vocab_size(),
            model_type="llama",
            eos_token_ids=[tokenizer.eos_token_id],
            max_req_input_len=profile.context_length,
            architectures=["LlamaForCausalLM"],
        )

    async def GetServerInfo(  # noqa: N802
        self, request: pb.GetServerInfoRequest, context: Context
    ) -> pb.GetServerInfoResponse:
        """The server arguments and the scheduler's state, as /server_info reports them."""
        emulator = self.emulator
        stats = emulator.model.stats(emulator.driver.now())
        info = server_info(
            emulator.config, tokenizer_dir=emulator.tokenizer.path, stats=stats, version=__version__
        )
        internal = info.pop("internal_states")[0]
        return pb.GetServerInfoResponse(
            server_args=_struct(info),
            scheduler_info=_struct(internal),
            active_requests=stats.num_running_reqs + stats.num_queue_reqs,
            uptime_seconds=emulator.driver.now() - emulator.model.started_at,
            sglang_version=SGLANG_VERSION,
            server_type="grpc",
            max_total_num_tokens=stats.max_total_num_tokens,
        )

    async def GetLoads(  # noqa: N802
        self, request: pb.GetLoadsRequest, context: Context
    ) -> pb.GetLoadsResponse:
        """The one rank's load: queue, running set, KV usage, throughput, hit rate."""
        stats = self.emulator.model.stats(self.emulator.driver.now())
        limit = self.emulator.config.profile.max_running_requests
        return json_format.ParseDict(
            loads(stats, max_running_requests=limit), pb.GetLoadsResponse()
        )

    async def GetTokenizer(  # noqa: N802
        self, request: common.GetTokenizerRequest, context: Context
    ) -> AsyncIterator[common.GetTokenizerChunk]:
        """The tokenizer directory as a zip, in chunks; the last one carries its SHA-256."""
        data = await asyncio.to_thread(_zip_directory, self.emulator.tokenizer.path)
        digest = hashlib.sha256(data).hexdigest()
        for start in range(0, len(data), TOKENIZER_CHUNK_BYTES):
            last = start + TOKENIZER_CHUNK_BYTES >= len(data)
            chunk = data[start : start + TOKENIZER_CHUNK_BYTES]
            yield common.GetTokenizerChunk(data=chunk, sha256=digest if last else "")

    # -- the cache ---------------------------------------------------------------------------

    async def SubscribeKvEvents(  # noqa: N802
        self, request: common.SubscribeKvEventsRequest, context: Context
    ) -> AsyncIterator[common.KvEventBatch]:
        """The replica's KV-cache events, from the subscriber's cursor (kv_events.py)."""
        await self._admit(context)
        # smg waits 2 s for the stream's headers before it retries: send them now.
        await context.send_initial_metadata(())
        async for batch in self.kv_events.subscribe(request.start_sequence_number):
            yield batch

    async def FlushCache(  # noqa: N802
        self, request: common.FlushCacheRequest, context: Context
    ) -> common.FlushCacheResponse:
        """Drop the prefix cache when idle, as /flush_cache does."""
        flushed = self.emulator.model.flush_cache(now=self.emulator.driver.now())
        message = "" if flushed else "requests are running or waiting"
        return common.FlushCacheResponse(success=flushed, message=message)

    # -- admission ---------------------------------------------------------------------------

    async def _admit(self, context: Context) -> None:
        """A crashed replica answers nothing useful; with an API key, the caller must send it."""
        if self.emulator.model.health(self.emulator.driver.now()) is Health.CRASHED:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "The replica is not running.")
        key = self.emulator.config.api_key
        metadata = dict(context.invocation_metadata() or ())
        if key is not None and metadata.get("authorization") != f"Bearer {key}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "Unauthorized")


def _generate_body(request: pb.GenerateRequest) -> dict[str, Any]:
    """The /generate body the same request would have had: one parser judges both."""
    params = request.sampling_params
    sampling: dict[str, Any] = {"ignore_eos": params.ignore_eos}
    if params.HasField("max_new_tokens"):
        sampling["max_new_tokens"] = params.max_new_tokens
    sampling["stop"] = list(params.stop)
    sampling["stop_token_ids"] = list(params.stop_token_ids)
    sampling["min_new_tokens"] = params.min_new_tokens
    if params.n > 1:  # proto3's 0 is "not set", one sample
        sampling["n"] = params.n
    body: dict[str, Any] = {
        "input_ids": list(request.tokenized.input_ids),
        "sampling_params": sampling,
        "stream": request.stream,
    }
    if request.request_id:
        body["rid"] = request.request_id
    if request.return_logprob:
        body |= {"return_logprob": True, "top_logprobs_num": request.top_logprobs_num}
    if request.lora_id:
        body["lora_path"] = request.lora_id  # the adapter's name, as smg passes it
    return body


def _counted_ids(job: Job) -> list[int]:
    """The ids smg is sent: the answer and a stop string's tokens (smg detokenizes and trims)."""
    return job.answer_ids + job.stop_ids


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    # Through JSON: paths, enums and None become what a Struct can hold.
    return json_format.ParseDict(json.loads(json.dumps(values, default=str)), struct_pb2.Struct())


def _zip_directory(path: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(p for p in path.iterdir() if p.is_file()):
            archive.write(file, arcname=file.name)
    return buffer.getvalue()


async def start_grpc(
    emulator: ServedReplica, *, host: str, port: int
) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server for `emulator` on host:port (0: any free port); returns the port."""
    server = grpc.aio.server()
    register = pb_grpc.add_SglangSchedulerServicer_to_server  # generated, untyped
    register(SchedulerServicer(emulator), server)  # type: ignore[no-untyped-call]
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {host}:{port}")
    await server.start()
    log.info("gRPC (smg-grpc-proto SglangScheduler) on %s:%d", host, bound)
    return server, bound
