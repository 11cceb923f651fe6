"""The emulated replica both servers serve: the replica model, its real-time driver, the
tokenizer and the metrics, and the generation the HTTP server (:mod:`radixfleet.emulator.server`)
and the gRPC one (:mod:`radixfleet.emulator.grpc_server`) share: a job's samples queued as one,
waited on, and their outcomes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from radixfleet.emulator import protocol
from radixfleet.emulator.answers import Outcome, Sample, TierReport
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.disagg import DisaggRole
from radixfleet.emulator.driver import Driver, Ticket
from radixfleet.emulator.metrics import build_registry
from radixfleet.emulator.protocol import ApiError, Job
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.replica import MonotonicClock, Phase, RejectedError, ReplicaModel, RequestSpec
from radixfleet.replica.tiers import TierStore


class EmulatedReplica:
    """One replica: the model, its real-time driver, the tokenizer and the metrics."""

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
            **_tiers(config),
        )
        self.driver = Driver(self.model, clock=clock, stream_interval=config.stream_interval)
        metrics = build_registry(
            stats=lambda: self.model.stats(self.driver.now()),
            profile=config.profile,
            model_name=config.model_name,
            hicache=config.hicache,
            engine_type=config.engine_type,
        )
        self.registry, self.histograms, self.responses = (
            metrics.registry, metrics.histograms, metrics.responses,
        )  # fmt: skip
        self.role = (
            None
            if config.disaggregation is None
            else DisaggRole(
                config.disaggregation,
                profile=config.profile,
                labels=metrics.labels,
                registry=metrics.registry,
            )
        )
        self.health_checks = 0  # answered /health and /health_generate probes, for tests
        self.grpc_port: int | None = None  # where gRPC listens, once started

    # -- generation --------------------------------------------------------------------------

    def submit(self, job: Job, *, transferred_tokens: int = 0) -> Ticket:
        """Queue one sample, or raise ApiError with SGLang's status and message.
        `transferred_tokens` are prompt tokens whose KV a prefill peer sent (a decode role)."""
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
            transferred_tokens=transferred_tokens,
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

    async def samples(self, job: Job) -> list[Job]:
        """The request's `n` samples (`protocol.samples`): beyond the first, each is answered
        afresh, tokenizer work done off the event loop."""
        if job.samples == 1:
            return [job]
        return await asyncio.to_thread(protocol.samples, job, self.tokenizer)

    def submit_all(self, jobs: list[Job], *, transferred_tokens: int = 0) -> list[Ticket]:
        """Queue every sample, or none: one refused releases those already queued."""
        tickets: list[Ticket] = []
        try:
            for job in jobs:
                tickets.append(self.submit(job, transferred_tokens=transferred_tokens))
        except ApiError:
            for ticket in tickets:
                self.driver.release(ticket)
            raise
        return tickets

    async def wait_done(self, ticket: Ticket) -> None:
        """Return once the ticket's request has finished or been aborted."""
        while not ticket.request.done:
            await ticket.changed.wait()
            ticket.changed.clear()

    def outcome(self, ticket: Ticket) -> Outcome:
        """What the ticket's request has produced so far."""
        request = ticket.request
        finished = request.phase is Phase.FINISHED
        tokens = self.driver.generated(ticket)
        return Outcome(
            completion_tokens=tokens,
            cached_tokens=request.cached_tokens,
            finished=finished,
            e2e_latency=request.e2e_latency or 0.0,
            host_cached_tokens=request.host_cached_tokens,
            storage_cached_tokens=request.storage_cached_tokens,
            tiers=self.tiers,
        )

    def finished(self, job: Job, ticket: Ticket) -> Sample:
        """A sample's answer, once it has ended (its latencies observed)."""
        self.histograms.observe(ticket.request)
        return Sample(job, self.final_outcome(job, ticket))

    def final_outcome(self, job: Job, ticket: Ticket) -> Outcome:
        """A finished sample's outcome, as the answer reports it."""
        outcome = self.outcome(ticket)
        # The model runs at least one step even for max_new_tokens=0; report what was asked.
        return replace(outcome, completion_tokens=job.completion_tokens, finished=True)

    @property
    def tiers(self) -> TierReport:
        """Which HiCache tiers the replica reports hits from."""
        hicache = self.config.hicache
        if hicache is None:
            return TierReport()
        return TierReport(hicache=True, storage_backend=hicache.storage_backend_class)


def _tiers(config: EmulatorConfig) -> dict[str, Any]:
    """The replica model's host tier and storage backend (in this process: see hicache.py)."""
    hicache = config.hicache
    if hicache is None:
        return {}
    storage = None
    if hicache.storage_backend is not None:
        tokens, block = hicache.storage_tokens, config.block_tokens
        storage = TierStore(capacity_tokens=tokens, block_tokens=block)
    return {"host_tier": hicache.host_tier(config.profile), "storage": storage}
