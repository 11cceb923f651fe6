"""The autoscaler on the local fleet: the same `decide()` driving a model's `Scaler` on loopback.

Observe: each ready replica's `/metrics` (SGLang's gauges, as the emulator exports them; no
Prometheus needed), the entry's held requests while the model has no ready replica (the
activator's view), and rates from the counters' change since the last tick. Act: scale up with
`scale_to`; scale down by draining the chosen replicas one by one (`drain` takes a replica out
of the router, lets its streams finish, then stops it), then `scale_to` for the rest (starting
ones). Everything runs on the fleet's event loop (`LocalFleet.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from radixfleet import metrics_names as m
from radixfleet.controllers.autoscale.decide import Decision, decide
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import AutoscaleStatus, Observed, ReplicaMetrics
from radixfleet.localfleet.entry import RegionEntry
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState, Scaler

GAUGES = {
    m.SGLANG_RUNNING: "running",
    m.SGLANG_QUEUE: "queued",
    m.SGLANG_TOKEN_USAGE: "kv_usage",
    m.SGLANG_GEN_THROUGHPUT: "gen_throughput",
    m.SGLANG_CACHE_HIT_RATE: "hit_rate",
}
COUNTERS = {m.SGLANG_CACHED_TOKENS: "cached", m.SGLANG_REQUESTS: "requests"}
SCRAPE_TIMEOUT_S = 2.0


@dataclass
class Scrape:
    """One replica's gauges (None when absent) and counter totals."""

    gauges: dict[str, float | None]
    counters: dict[str, float]


def parse_metrics(text: str) -> Scrape:
    """SGLang's exposition as gauges by ReplicaMetrics field and counter totals."""
    gauges: dict[str, float | None] = dict.fromkeys(GAUGES.values())
    counters = dict.fromkeys(COUNTERS.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in GAUGES:
                gauges[GAUGES[sample.name]] = max(gauges[GAUGES[sample.name]] or 0.0, sample.value)
            elif sample.name in COUNTERS:
                counters[COUNTERS[sample.name]] += sample.value
    return Scrape(gauges, counters)


@dataclass
class LocalFleetAutoscaler:
    """decide() for one model of one region of a LocalFleet; `tick` is one decision."""

    scaler: Scaler
    entry: RegionEntry
    spec: AutoscalePolicySpec
    clock: Callable[[], float] = time.time
    status: AutoscaleStatus | None = None
    decisions: list[Decision] = field(default_factory=list)
    _totals: dict[str, dict[str, float]] = field(default_factory=dict)
    _last_at: float | None = None
    _session: aiohttp.ClientSession | None = None

    async def tick(self) -> Decision:
        """Observe, decide, act; keeps the status as the CR would."""
        now = self.clock()
        observed = await self.observe(now)
        decision = decide(observed, self.spec, self.status, datetime.fromtimestamp(now, UTC))
        self.status = decision.status
        self.decisions.append(decision)
        self.act(decision)
        return decision

    async def run(self) -> None:
        """Tick every `intervalSeconds` until cancelled."""
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.spec.interval_seconds)
        finally:
            if self._session is not None:
                await self._session.close()

    async def observe(self, now: float) -> Observed:
        replicas = self.scaler.replicas()
        ready = [r for r in replicas if r.state is ReplicaState.READY]
        scrapes = await asyncio.gather(*(self._scrape(r) for r in ready))
        last, self._last_at = self._last_at, now
        elapsed = self.spec.interval_seconds if last is None else now - last
        elapsed = max(elapsed, 1e-3)
        metrics = [self._metrics(r, s, elapsed) for r, s in zip(ready, scrapes, strict=True)]
        held = self.entry.in_flight[self.scaler.model] if not ready else 0
        rate = self._rate("requests", scrapes, ready, elapsed)
        return Observed(
            ready=len(ready),
            replicas=tuple(metrics),
            starting=sum(r.state is ReplicaState.STARTING for r in replicas),
            # The first look has no counters before it: the rate is unknown, not zero.
            arrival_rate=None if last is None else rate,
            waiting=float(held),
            revision=f"{self.scaler.region}/{self.scaler.model}",
        )

    def act(self, decision: Decision) -> None:
        """Scale up at once; scale down by draining the chosen replicas first."""
        desired, current = decision.desired, self.scaler.desired()
        if desired > current:
            self.scaler.scale_to(desired)
            return
        for victim in decision.victims:
            if self.scaler.desired() <= desired:
                break
            self.scaler.drain(victim)
        if self.scaler.desired() > desired:
            self.scaler.scale_to(desired)

    async def _scrape(self, replica: ReplicaInfo) -> Scrape | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
            )
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._session.get(f"{replica.url}/metrics") as response:
                if response.status == 200:
                    return parse_metrics(await response.text())
        return None  # a failed scrape: the replica's gauges are missing, and decide() halts

    def _metrics(
        self, replica: ReplicaInfo, scrape: Scrape | None, elapsed: float
    ) -> ReplicaMetrics:
        if scrape is None:
            return ReplicaMetrics(name=replica.id, running=None, queued=None, kv_usage=None)
        before = self._totals.get(replica.id, scrape.counters)
        cached = max(0.0, scrape.counters["cached"] - before["cached"]) / elapsed
        return ReplicaMetrics(name=replica.id, cached_tokens_rate=cached, **scrape.gauges)

    def _rate(
        self, counter: str, scrapes: list[Scrape | None], ready: list[ReplicaInfo], elapsed: float
    ) -> float:
        done = 0.0
        for replica, scrape in zip(ready, scrapes, strict=True):
            if scrape is None:
                continue
            before = self._totals.get(replica.id, scrape.counters)
            done += max(0.0, scrape.counters[counter] - before[counter])
        self._totals = {
            r.id: s.counters for r, s in zip(ready, scrapes, strict=True) if s is not None
        }
        return done / elapsed
