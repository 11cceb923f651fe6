"""One replica of the local fleet: its process and state, what happens to it (`ScaleEvent`),
the P/D role it may play, and how it starts (`EmulatorLauncher`: an emulated SGLang process
with the fleet's clocks and the model's profile). `ReplicaSet` (replicas.py) keeps a model's
replicas at a count."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import yaml

from radixfleet.localfleet.procs import Child, Supervisor
from radixfleet.localfleet.router import WorkerRole
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.localfleet.spec import LocalFleetSpec, ModelSpec
from radixfleet.profile import resolve_profile


class ReplicaStartError(RuntimeError):
    """A replica process exited or never became healthy."""


@dataclass(frozen=True)
class ScaleEvent:
    """Something that happened to a replica set, for reports: `kind` and unix time `at`."""

    at: float
    kind: str  # "wake", "woken", "prewarmed", "ready", "failed", "exited", "stopped"
    replica: str = ""
    seconds: float | None = None  # "ready": since the replica started; "woken": since the wake;
    # "prewarmed": the warm-up's length
    detail: str = ""


@dataclass
class Replica:
    """One emulated replica process."""

    id: str
    url: str  # its HTTP interface: health, drain, metrics
    worker_url: str  # where its router sends requests (grpc:// or http://)
    child: Child
    state: ReplicaState = ReplicaState.STARTING
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    worker_id: str | None = None
    role: WorkerRole | None = None  # a P/D role, as its router registers it

    def info(self) -> ReplicaInfo:
        return ReplicaInfo(self.id, self.url, self.state, self.started_at, self.ready_at)


class ReplicaRole(Protocol):
    """A P/D role of a replica set's replicas (radixfleet/localfleet/pairs.py): the flags a new
    replica starts with, how its router registers it, and what it waits for first."""

    def launch(self) -> tuple[list[str], WorkerRole]: ...

    async def before_register(self) -> None: ...


@dataclass
class EmulatorLauncher:
    """Starts emulated replicas (`python -m radixfleet.emulator`) with the fleet's clocks."""

    supervisor: Supervisor
    fleet: LocalFleetSpec
    workdir: Path
    host: str = "127.0.0.1"
    cache_dir: Path | None = None

    def launch(
        self,
        *,
        name: str,
        port: int,
        model: ModelSpec,
        warm: bool,
        seed: int,
        grpc_port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> Child:
        """Start one replica of `model` on `port` (and SGLang's gRPC protocol on `grpc_port`)."""
        argv = [
            sys.executable, "-m", "radixfleet.emulator",
            "--host", self.host, "--port", str(port),
            "--profile", str(self.profile_file(model)),
            "--model", model.name,
            "--time-scale", str(self.fleet.time_scale),
            "--seed", str(seed),
            "--warm" if warm else "--no-warm",
        ]  # fmt: skip
        if self.cache_dir is not None:
            argv += ["--cache-dir", str(self.cache_dir)]
        if grpc_port is not None:
            argv += ["--grpc-port", str(grpc_port)]
        argv += model.sglang_args  # `radixfleet emulate` takes them under SGLang's spelling
        argv += extra_args
        if model.lora_adapters:
            # None loaded at start: the entry loads each on demand (localfleet/lora.py).
            bound = str(model.max_loaded_loras)
            argv += ["--enable-lora", "--max-loaded-loras", bound, "--max-loras-per-batch", bound]
        return self.supervisor.spawn(name, argv, log_path=self.workdir / "logs" / f"{name}.log")

    def profile_file(self, model: ModelSpec) -> Path:
        """The model's profile as YAML: the built-in, its overrides, the fleet's cold start."""
        path = self.workdir / "profiles" / f"{model.name}.yaml"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(self._profile_fields(model)))
        return path

    def kv_capacity_tokens(self, model: ModelSpec) -> int:
        """The KV cache of one of the model's replicas, in tokens."""
        fields = self._profile_fields(model)
        return int(
            fields.get("kv_capacity_tokens", resolve_profile(model.profile).kv_capacity_tokens)
        )

    def _profile_fields(self, model: ModelSpec) -> dict[str, Any]:
        base = resolve_profile(model.profile)
        fields: dict[str, Any] = {"base": base.name, **model.profile_overrides}
        cold = self.fleet.cold_start_s
        if cold is not None and base.cold_start_seconds > 0:
            # Keep the phases' proportions; only the total changes.
            share = cold / base.cold_start_seconds
            for phase in ("container_start_s", "weights_load_s", "graph_capture_s"):
                fields[phase] = getattr(base, phase) * share
        return fields


# -- its HTTP interface (SGLang's /health, /get_load and /metrics) ---------------------------


async def is_healthy(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=5)) as answer:
            return answer.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def queued_requests(session: aiohttp.ClientSession, url: str) -> int | None:
    """Requests queued at a replica (its /get_load); None when it cannot say."""
    try:
        async with session.get(f"{url}/get_load", timeout=aiohttp.ClientTimeout(total=5)) as answer:
            loads = await answer.json(content_type=None)
        return sum(int(rank.get("num_waiting_reqs", 0)) for rank in loads)
    except (aiohttp.ClientError, TimeoutError, ValueError, TypeError, AttributeError):
        return None


async def wait_drained(session: aiohttp.ClientSession, url: str, *, timeout_s: float) -> None:
    """Wait until the replica runs and queues nothing (its /get_load), or the timeout."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        try:
            async with session.get(f"{url}/get_load") as answer:
                loads = await answer.json(content_type=None)
            if sum(int(rank.get("num_reqs", 0)) for rank in loads) == 0:
                return
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError, AttributeError):
            return  # it cannot answer: nothing left to wait for
        await asyncio.sleep(0.1)


async def scraped(
    session: aiohttp.ClientSession, url: str, parse: Callable[[str], dict[str, float]]
) -> dict[str, float]:
    """A replica's /metrics, read by `parse`; nothing if it cannot say."""
    try:
        async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as got:
            return parse(await got.text())
    except (aiohttp.ClientError, TimeoutError):
        return {}
