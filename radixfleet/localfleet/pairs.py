"""A prefill/decode pair on the local fleet: one model served by SGLang's two roles behind one
smg in PD mode, scaled as one.

`PairSet` is the model's `Scaler`: its prefill and its decode replica sets (each a `ReplicaSet`
whose replicas start with `--disaggregation-mode` and register with their role). Its count is
the model's pairs: `scale_to(n)` asks for n of each role, through the pair rule
(radixfleet/controllers/autoscale/pairs.py), and a model at zero is woken whole: the entry's
`scale_to(1)` starts both roles, and its `wait_ready` returns once both serve, so the router
never gets a request it has no pair for. So that no decode replica runs without a prefill peer:

- a decode replica registers with the router only once a prefill replica is ready;
- the pair goes to zero decode first: the prefill replicas stop once no decode replica is left
  (and stay if a request woke the pair meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from radixfleet.localfleet.procs import free_ports
from radixfleet.localfleet.replica import ReplicaRole, ScaleEvent
from radixfleet.localfleet.replicas import ReplicaSet
from radixfleet.localfleet.router import WorkerRole
from radixfleet.localfleet.scaler import PairRule, ReplicaInfo
from radixfleet.localfleet.spec import ModelSpec
from radixfleet.replica.disagg import TransferBackend

# How long the prefill replicas of a pair going to sleep wait for its decode replicas to stop.
SLEEP_TIMEOUT_S = 120.0
POLL_S = 0.05


@dataclass(frozen=True)
class PrefillRole:
    """Prefill replicas: each with a bootstrap port of its own, which its router learns."""

    host: str
    transfer_backend: TransferBackend

    def launch(self) -> tuple[list[str], WorkerRole]:
        (port,) = free_ports(1, self.host)
        args = ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port),
                "--disaggregation-transfer-backend", self.transfer_backend]  # fmt: skip
        return args, WorkerRole("prefill", port)

    async def before_register(self) -> None:
        return None


@dataclass(frozen=True)
class DecodeRole:
    """Decode replicas: registered only once a prefill peer serves."""

    prefill: ReplicaSet
    transfer_backend: TransferBackend

    def launch(self) -> tuple[list[str], WorkerRole]:
        args = ["--disaggregation-mode", "decode",
                "--disaggregation-transfer-backend", self.transfer_backend]  # fmt: skip
        return args, WorkerRole("decode")

    async def before_register(self) -> None:
        # The replica set bounds this wait by its start timeout.
        while self.prefill.ready_count() == 0:
            await asyncio.sleep(POLL_S)


MakeSet = Callable[[ModelSpec, str, ReplicaRole], ReplicaSet]


class PairSet:
    """The `Scaler` of a P/D model: its two roles' replica sets, scaled as one pair."""

    def __init__(self, spec: ModelSpec, *, make_set: MakeSet, rule: PairRule, host: str) -> None:
        """`make_set(spec, role name, role)` starts one role's reconciling replica set; `rule`
        is the pair rule (radixfleet/controllers/autoscale/pairs.pair_counts)."""
        pd = spec.disaggregation
        if pd is None:
            raise ValueError(f"{spec.name} is not a prefill/decode model")
        self.spec, self.rule = spec, rule
        backend = pd.transfer_backend
        self.prefill = make_set(_role_spec(spec, pd.prefill), "prefill", PrefillRole(host, backend))
        self.decode = make_set(
            _role_spec(spec, pd.decode), "decode", DecodeRole(self.prefill, backend)
        )
        self._asleep = pd.pairs == 0
        self._sleeping: asyncio.Task[None] | None = None

    # -- the Scaler port ---------------------------------------------------------------------

    @property
    def region(self) -> str:
        return self.prefill.region

    @property
    def model(self) -> str:
        return self.spec.name

    @property
    def revision(self) -> str:
        return self.prefill.revision

    @property
    def roles(self) -> tuple[ReplicaSet, ReplicaSet]:
        """The prefill and the decode replica sets."""
        return self.prefill, self.decode

    def desired(self) -> int:
        """Pairs asked for."""
        return min(self.prefill.desired(), self.decode.desired())

    def ready_count(self) -> int:
        """Pairs that serve: a request needs a ready replica of each role."""
        return min(self.prefill.ready_count(), self.decode.ready_count())

    def replicas(self) -> list[ReplicaInfo]:
        return [*self.prefill.replicas(), *self.decode.replicas()]

    def scale_to(self, replicas: int) -> int:
        """Ask for `replicas` pairs: as many of each role. With no pair serving, it is a wake
        (the entry's): the missing role comes, and the other keeps what it has."""
        if replicas > 0 and self.ready_count() == 0:
            prefill, decode = (max(replicas, role.desired()) for role in self.roles)
            return self.scale_roles(prefill=prefill, decode=decode, waiting=True)
        return self.scale_roles(prefill=replicas, decode=replicas, waiting=False)

    def scale_roles(self, *, prefill: int, decode: int, waiting: bool) -> int:
        """Ask for each role's count, as the pair rule makes them; returns the pairs asked for."""
        counts = self.rule(prefill=prefill, decode=decode, waiting=waiting)
        self._asleep = counts.asleep
        if counts.asleep:
            self.decode.scale_to(0)
            if self._sleeping is None or self._sleeping.done():
                self._sleeping = asyncio.get_running_loop().create_task(self._sleep_prefill())
            return 0
        prefills = self.prefill.scale_to(counts.prefill)
        return min(prefills, self.decode.scale_to(counts.decode))

    def drain(self, replica_id: str) -> bool:
        """Take one replica down, unless it is the last of its role while the pair serves."""
        for role in self.roles:
            if any(info.id == replica_id for info in role.replicas()):
                if role.desired() <= 1:
                    return False  # the pair goes to zero whole, through scale_to(0)
                return role.drain(replica_id)
        return False

    async def wait_ready(self, *, at_least: int = 1, timeout_s: float) -> bool:
        """Wait until `at_least` pairs serve: that many ready replicas of each role."""
        ready = await asyncio.gather(
            *(role.wait_ready(at_least=at_least, timeout_s=timeout_s) for role in self.roles)
        )
        return all(ready)

    # -- the rest the fleet reads ------------------------------------------------------------

    @property
    def events(self) -> list[ScaleEvent]:
        return sorted([*self.prefill.events, *self.decode.events], key=lambda e: e.at)

    async def close(self) -> None:
        if self._sleeping is not None:
            self._sleeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sleeping
        await asyncio.gather(*(role.close() for role in self.roles))

    async def _sleep_prefill(self) -> None:
        """Stop the prefill replicas once no decode replica is left, unless woken meanwhile."""
        deadline = asyncio.get_running_loop().time() + SLEEP_TIMEOUT_S
        while self.decode.replicas() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(POLL_S)
        if self._asleep and not self.decode.replicas():
            self.prefill.scale_to(0)


def _role_spec(spec: ModelSpec, replicas: int) -> ModelSpec:
    """One role's replica set's spec: the model's, with that role's count."""
    return spec.model_copy(update={"replicas": replicas})


# ---- what the pair moved ---------------------------------------------------------------------

# The prefill's KV transfer histograms (SGLang observes them on the sender), summed.
TRANSFER_SAMPLES = {
    "sglang:kv_transfer_total_mb_sum": "mb",
    "sglang:kv_transfer_total_mb_count": "transfers",
    "sglang:kv_transfer_latency_ms_sum": "latency_ms",
}


def kv_transfers(metrics_text: str) -> dict[str, float]:
    """`mb`, `transfers` and `latency_ms` (summed) of a prefill replica's Prometheus exposition."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            key = TRANSFER_SAMPLES.get(sample.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + sample.value
    return out
