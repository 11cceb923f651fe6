"""SGLang's prefill/decode roles in the emulated replica (`--disaggregation-mode prefill|decode`):
what each role does to a request, and the metrics it exports.

As in SGLang 0.5.23:

- the **prefill** replica runs the prompt and answers one token (smg does not pass it to the
  client); once prefilled, the request's room is published on its bootstrap server
  (:mod:`radixfleet.emulator.bootstrap`) for the decode peer;
- the **decode** replica collects the room from the prefill's bootstrap server, waits the KV
  transfer, then decodes from the received KV (no prefill pass: the replica model's
  `transferred_tokens`). Its time to first token counts from the request's arrival, the wait
  for the prefill and the transfer included, as SGLang's decode measures it;
- a request without a bootstrap room, in either role, gets SGLang's 400.

Each role exports SGLang's disaggregation families under their real names: the queue gauges of
its role, the bootstrap and transfer failure counters, and on the prefill (the sender, which
observes them in SGLang) the KV transfer histograms.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from radixfleet.emulator.bootstrap import (
    Bootstrap,
    BootstrapServer,
    DisaggConfig,
    DisaggCounts,
    Role,
    bootstrap_of,
    receive,
)
from radixfleet.emulator.driver import Ticket
from radixfleet.emulator.metrics import BucketHistogram
from radixfleet.emulator.protocol import Job
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import Phase

TRANSFER_MS_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)
TRANSFER_MB_BUCKETS = (1.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0, 50000.0)
TRANSFER_GB_S_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0)


class DisaggCollector(Collector):
    """The disaggregation families SGLang 0.5.23 exports in one role, with its names."""

    def __init__(self, *, mode: Role, counts: DisaggCounts, labels: dict[str, str]) -> None:
        self._mode, self._counts, self._labels = mode, counts, labels
        self.latency = BucketHistogram(
            "sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.",
            TRANSFER_MS_BUCKETS)  # fmt: skip
        self.size = BucketHistogram(
            "sglang:kv_transfer_total_mb", "Histogram of KV cache transfer size in MB.",
            TRANSFER_MB_BUCKETS)  # fmt: skip
        self.speed = BucketHistogram(
            "sglang:kv_transfer_speed_gb_s", "Histogram of KV cache transfer speed in GB/s.",
            TRANSFER_GB_S_BUCKETS)  # fmt: skip

    def observe_transfer(self, seconds: float, sent_bytes: int) -> None:
        """One room's KV sent to its decode peer."""
        self.latency.observe(seconds * 1000.0)
        self.size.observe(sent_bytes / 1e6)
        if seconds > 0:
            self.speed.observe(sent_bytes / 1e9 / seconds)

    def collect(self) -> Iterator[Metric]:
        values = list(self._labels.values())
        for name, doc, value in self._gauges():
            gauge = GaugeMetricFamily(name, doc, labels=list(self._labels))
            gauge.add_metric(values, value)
            yield gauge
        c = self._counts
        for name, doc, total in (
            ("sglang:num_bootstrap_failed_reqs", "The number of bootstrap failed requests.",
             c.bootstrap_failed),
            ("sglang:num_transfer_failed_reqs", "The number of transfer failed requests.",
             c.transfer_failed),
        ):  # fmt: skip
            counter = CounterMetricFamily(name, doc, labels=list(self._labels))
            counter.add_metric(values, total)
            yield counter
        if self._mode == "prefill":
            for histogram in (self.latency, self.size, self.speed):
                yield histogram.family(self._labels)

    def _gauges(self) -> list[tuple[str, str, float]]:
        c = self._counts
        if self._mode == "prefill":
            return [
                ("sglang:num_prefill_bootstrap_queue_reqs",
                 "The number of requests in the prefill bootstrap queue.", c.bootstrap_queue),
                ("sglang:num_prefill_inflight_queue_reqs",
                 "The number of requests in the prefill inflight queue.", c.inflight_queue),
            ]  # fmt: skip
        return [
            ("sglang:num_decode_prealloc_queue_reqs",
             "The number of requests in the decode prealloc queue.", c.prealloc_queue),
            ("sglang:num_decode_transfer_queue_reqs",
             "The number of requests in the decode transfer queue.", c.transfer_queue),
        ]  # fmt: skip


@dataclass(frozen=True)
class Admitted:
    """A request as its role runs it: the job (one token on a prefill), the prompt tokens
    whose KV arrived (on a decode), and its bootstrap."""

    job: Job
    transferred_tokens: int
    bootstrap: Bootstrap


class DisaggRole:
    """One replica's P/D role: what it does before and after the replica model runs a request."""

    def __init__(
        self,
        config: DisaggConfig,
        *,
        profile: ReplicaProfile,
        labels: dict[str, str],
        registry: CollectorRegistry,
    ) -> None:
        self.config, self.profile = config, profile
        self.counts = DisaggCounts()
        self.collector = DisaggCollector(mode=config.mode, counts=self.counts, labels=labels)
        registry.register(self.collector)
        self.bootstrap = (
            BootstrapServer(
                config=config,
                profile=profile,
                counts=self.counts,
                observe=self.collector.observe_transfer,
            )
            if config.mode == "prefill"
            else None
        )
        self._publishing: set[asyncio.Task[None]] = set()

    def serving(self, host: str) -> Callable[[web.Application], AsyncIterator[None]]:
        """The app's cleanup context: the bootstrap server (a prefill's) for as long as it runs."""

        async def serve(_app: web.Application) -> AsyncIterator[None]:
            if self.bootstrap is not None:
                await self.bootstrap.start(host)
            yield
            if self.bootstrap is not None:
                await self.bootstrap.stop()

        return serve

    async def admit(self, job: Job, body: dict[str, Any]) -> Admitted:
        """The request as this role runs it; a decode returns once the KV has arrived."""
        bootstrap = bootstrap_of(body, rid=job.rid)
        if self.config.mode == "prefill":
            return Admitted(_one_token(job), 0, bootstrap)
        await receive(
            bootstrap, rid=job.rid, config=self.config, profile=self.profile, counts=self.counts
        )
        return Admitted(job, len(job.prompt_ids), bootstrap)

    def started(
        self,
        ticket: Ticket,
        admitted: Admitted,
        *,
        arrived: float,
        done: Callable[[Ticket], Awaitable[None]],
    ) -> None:
        """The model has the request: a prefill publishes its room once prefilled; a decode's
        request counts from its arrival, before the wait for its KV."""
        if self.config.mode == "decode":
            ticket.request.arrival = arrived
            return
        self.counts.bootstrap_queue += 1
        task = asyncio.create_task(self._publish(ticket, admitted, done))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(
        self, ticket: Ticket, admitted: Admitted, done: Callable[[Ticket], Awaitable[None]]
    ) -> None:
        try:
            await done(ticket)
        finally:
            self.counts.bootstrap_queue -= 1
        if ticket.request.phase is Phase.FINISHED and self.bootstrap is not None:
            tokens = ticket.request.spec.prompt_tokens
            self.bootstrap.published(admitted.bootstrap.room, prompt_tokens=tokens)


def _one_token(job: Job) -> Job:
    """SGLang's prefill role runs the prefill pass and answers its one token."""
    return replace(
        job,
        answer_ids=job.answer_ids[:1],
        stop_ids=[],
        stopped=False,
        matched_stop=None,
        max_new_tokens=min(job.max_new_tokens, 1),
    )
