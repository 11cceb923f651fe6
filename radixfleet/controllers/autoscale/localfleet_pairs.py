"""The autoscaler on a local fleet's prefill/decode pair: `decide()` once per role, put together
by the pair rule (`pairs.pair_counts`), driving the model's `PairSet`.

Each role is observed as `LocalFleetAutoscaler` observes a model (its ready replicas' SGLang
gauges: the prefill's queue and running prefills, the decode's running requests, KV use and
throughput), with its own status, so each role's recommendation is its own. The rule then makes
the pair's counts: both to zero together once both are idle, both woken when a request waits at
the entry, never a decode replica without a prefill peer. The pair scales each role with
`scale_roles` (its replica sets choose which replica goes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from radixfleet.controllers.autoscale.decide import Decision, decide
from radixfleet.controllers.autoscale.localfleet import LocalFleetAutoscaler
from radixfleet.controllers.autoscale.pairs import PairCounts, pair_counts
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.localfleet.entry import RegionEntry
from radixfleet.localfleet.pairs import PairSet


@dataclass
class LocalFleetPairAutoscaler:
    """decide() per role of one P/D model of a LocalFleet; `tick` is one decision of the pair."""

    pair: PairSet
    entry: RegionEntry
    spec: AutoscalePolicySpec
    clock: Callable[[], float] = time.time
    counts: list[PairCounts] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.prefill = LocalFleetAutoscaler(
            scaler=self.pair.prefill, entry=self.entry, spec=self.spec, clock=self.clock
        )
        self.decode = LocalFleetAutoscaler(
            scaler=self.pair.decode, entry=self.entry, spec=self.spec, clock=self.clock
        )

    async def tick(self) -> PairCounts:
        """Observe both roles, decide each, and scale the pair as the rule says."""
        now = self.clock()
        prefill = await self._decide(self.prefill, now)
        decode = await self._decide(self.decode, now)
        waiting = self.pair.ready_count() == 0 and self.entry.in_flight[self.pair.model] > 0
        counts = pair_counts(prefill=prefill.desired, decode=decode.desired, waiting=waiting)
        self.pair.scale_roles(prefill=counts.prefill, decode=counts.decode, waiting=waiting)
        self.counts.append(counts)
        return counts

    async def run(self) -> None:
        """Tick every `intervalSeconds` until cancelled."""
        while True:
            await self.tick()
            await asyncio.sleep(self.spec.interval_seconds)

    @staticmethod
    async def _decide(role: LocalFleetAutoscaler, now: float) -> Decision:
        observed = await role.observe(now)
        decision = decide(observed, role.spec, role.status, datetime.fromtimestamp(now, UTC))
        role.status = decision.status
        role.decisions.append(decision)
        return decision
