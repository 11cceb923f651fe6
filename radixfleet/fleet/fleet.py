"""The local fleet: regions on loopback, each with an entry, a router per model and replicas.

`LocalFleet` runs its own event loop on a background thread: the region entries (aiohttp
servers in this process), the replica sets that reconcile emulator processes, and the HTTP
session they share. Routers, replicas and Prometheus are child processes under one
`Supervisor`, so `stop()` (or a signal, or interpreter exit) leaves nothing behind.

Its methods are thread-safe and synchronous, for tests, the demo and controllers that run
elsewhere; `run(coro)` runs a coroutine on the fleet's loop, where a controller can drive the
`Scaler`s (`scaler(region, model)`) directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from aiohttp import web

from radixfleet.emulator.tokenizer import ensure_tokenizer_dir
from radixfleet.fleet.entry import Gate, RegionEntry
from radixfleet.fleet.procs import Supervisor, free_port, stop_async
from radixfleet.fleet.prometheus import (
    PrometheusServer,
    Target,
    scrape_config,
    start_prometheus,
    write_targets,
)
from radixfleet.fleet.replicas import EmulatorLauncher, ReplicaSet, ScaleEvent
from radixfleet.fleet.router import Router, router_command
from radixfleet.fleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.fleet.spec import FleetSpec, RegionSpec
from radixfleet.profile import resolve_profile

T = TypeVar("T")
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0


class FleetError(RuntimeError):
    """The fleet could not start (the message says which part and shows its log)."""


@dataclass
class RegionRuntime:
    """A started region: its entry, and per model its router and replica set."""

    spec: RegionSpec
    entry: RegionEntry | None = None
    entry_url: str = ""
    runner: web.AppRunner | None = None
    routers: dict[str, Router] = field(default_factory=dict)
    sets: dict[str, ReplicaSet] = field(default_factory=dict)


class LocalFleet:
    """A fleet of emulated regions on this machine; a context manager that stops everything."""

    def __init__(
        self,
        spec: FleetSpec,
        *,
        workdir: Path | None = None,
        cache_dir: Path | None = None,
        host: str = "127.0.0.1",
        gates: Mapping[str, Gate] | None = None,
    ) -> None:
        self.spec = spec
        self.gates = dict(gates or {})  # by region: e.g. token budgets (policies/quota/gate.py)
        self.fleet_id = uuid.uuid4().hex
        self.host = host
        self.cache_dir = cache_dir
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="radixfleet-fleet-"))
        self.supervisor = Supervisor(marker=self.fleet_id)
        self.regions: dict[str, RegionRuntime] = {r.name: RegionRuntime(r) for r in spec.regions}
        self.prometheus: PrometheusServer | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fleet", daemon=True)
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        for region in spec.regions:  # an unknown profile fails here, before any process starts
            for model in region.models:
                resolve_profile(model.profile)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> LocalFleet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start routers, replicas and entries; return once every initial replica is ready."""
        self.supervisor.install_signal_handlers()
        self._thread.start()
        try:
            tokenizer = ensure_tokenizer_dir(self.cache_dir)  # built once, before N replicas race
            self.run(self._start(str(tokenizer)), timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop entries, replicas, routers and Prometheus; remove the work directory if ours."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(self._stop(), timeout_s=STOP_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self.supervisor.close(grace_s=2.0)  # whatever is left: routers, Prometheus, stragglers
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def run(self, work: Coroutine[Any, Any, T], *, timeout_s: float | None = None) -> T:
        """Run a coroutine on the fleet's loop and return its result (from any other thread)."""
        if threading.current_thread() is self._thread:
            work.close()
            raise RuntimeError("LocalFleet.run() called from the fleet's own loop")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=timeout_s)

    async def _start(self, tokenizer_dir: str) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        await self._start_routers(tokenizer_dir)
        self._write_router_targets()
        launcher = EmulatorLauncher(
            supervisor=self.supervisor,
            fleet=self.spec,
            workdir=self.workdir,
            host=self.host,
            cache_dir=self.cache_dir,
        )
        for region in self.regions.values():
            self._start_sets(region, launcher)
            await self._start_entry(region)
        await self._wait_initial_replicas()

    async def _start_routers(self, tokenizer_dir: str) -> None:
        assert self._session is not None
        for region in self.regions.values():
            for model in region.spec.models:
                region.routers[model.name] = self._spawn_router(region, model.name, tokenizer_dir)
        live = [r.wait_live(self._session, timeout_s=60) for r in self._all_routers()]
        await asyncio.gather(*live)

    def _spawn_router(self, region: RegionRuntime, model: str, tokenizer_dir: str) -> Router:
        port, metrics_port = free_port(self.host), free_port(self.host)
        argv = router_command(
            host=self.host,
            port=port,
            prometheus_port=metrics_port,
            policy=region.spec.router_policy,
            tokenizer_dir=tokenizer_dir,
            health_interval_s=self.spec.router_health_interval_s,
        )
        name = f"router-{region.spec.name}-{model}"
        child = self.supervisor.spawn(name, argv, log_path=self.workdir / "logs" / f"{name}.log")
        return Router(url=f"http://{self.host}:{port}", prometheus_port=metrics_port, child=child)

    def _start_sets(self, region: RegionRuntime, launcher: EmulatorLauncher) -> None:
        assert self._session is not None
        for model in region.spec.models:
            replica_set = ReplicaSet(
                region=region.spec.name,
                spec=model,
                router=region.routers[model.name],
                launcher=launcher,
                session=self._session,
                on_change=self._write_replica_targets,
            )
            region.sets[model.name] = replica_set
            self._tasks.append(asyncio.get_running_loop().create_task(replica_set.run()))

    async def _start_entry(self, region: RegionRuntime) -> None:
        assert self._session is not None
        region.entry = RegionEntry(
            region=region.spec.name,
            scalers=region.sets,
            routers={name: router.url for name, router in region.routers.items()},
            session=self._session,
            wake_timeout_s=self.spec.wake_timeout_s,
            retry_after_s=self.spec.retry_after_s,
            gate=self.gates.get(region.spec.name),
        )
        region.runner = web.AppRunner(region.entry.app, access_log=None, shutdown_timeout=1.0)
        await region.runner.setup()
        await web.TCPSite(region.runner, self.host, 0, backlog=4096).start()
        region.entry_url = f"http://{self.host}:{region.runner.addresses[0][1]}"

    async def _wait_initial_replicas(self) -> None:
        timeout = self.spec.replica_start_timeout_s
        waits = {
            (region.spec.name, name): rs.wait_ready(at_least=rs.spec.replicas, timeout_s=timeout)
            for region in self.regions.values()
            for name, rs in region.sets.items()
        }
        ready = await asyncio.gather(*waits.values())
        late = [key for key, ok in zip(waits, ready, strict=True) if not ok]
        if late:
            raise FleetError(f"replicas not ready in {timeout:.0f} s: {late}; {self._failures()}")

    def _failures(self) -> str:
        failed = [e for _, _, e in self.events() if e.kind == "failed"]
        return "; ".join(f"{e.replica}: {e.detail}" for e in failed[-3:]) or "no start failed"

    async def _stop(self) -> None:
        for region in self.regions.values():
            if region.runner is not None:
                await region.runner.cleanup()
        await asyncio.gather(*(rs.close() for rs in self._all_sets()))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        routers = [stop_async(self.supervisor, r.child, grace_s=3.0) for r in self._all_routers()]
        await asyncio.gather(*routers)
        if self._session is not None:
            await self._session.close()

    # -- what controllers and tests use --------------------------------------------------------

    def entry_url(self, region: str) -> str:
        """Base URL of a region's entry (OpenAI-compatible: append /v1/...)."""
        return self.regions[region].entry_url

    def entry_urls(self) -> dict[str, str]:
        """Every region's entry URL."""
        return {name: region.entry_url for name, region in self.regions.items()}

    def entry(self, region: str) -> RegionEntry:
        """A region's entry object (in-flight counts, wake records); read it on the loop."""
        entry = self.regions[region].entry
        if entry is None:
            raise FleetError("the fleet is not started")
        return entry

    def scaler(self, region: str, model: str) -> ReplicaSet:
        """The `Scaler` of a model in a region; call its methods on the fleet's loop (`run`)."""
        return self.regions[region].sets[model]

    def scale(
        self, region: str, model: str, replicas: int, *, wait: bool = True, timeout_s: float = 120
    ) -> bool:
        """Ask for `replicas`; with `wait`, return whether they were ready (or gone) in time."""
        replica_set = self.scaler(region, model)

        async def act() -> bool:
            target = replica_set.scale_to(replicas)
            if not wait:
                return True
            return await _settle(replica_set, target, timeout_s=timeout_s)

        return self.run(act(), timeout_s=timeout_s + 5)

    def ready_count(self, region: str, model: str) -> int:
        """Ready replicas of a model in a region."""
        replica_set = self.scaler(region, model)

        async def read() -> int:
            return replica_set.ready_count()

        return self.run(read())

    def replicas(self, region: str, model: str) -> list[ReplicaInfo]:
        """The replicas of a model in a region."""
        replica_set = self.scaler(region, model)

        async def read() -> list[ReplicaInfo]:
            return replica_set.replicas()

        return self.run(read())

    def set_faults(
        self,
        region: str,
        model: str,
        *,
        replica: str | None = None,
        hung: bool = False,
        slowdown: float = 1.0,
        error_rate: float = 0.0,
    ) -> None:
        """Inject faults in one replica, or in every replica of the model (emulator faults API)."""
        body = {"hung": hung, "slowdown": slowdown, "error_rate": error_rate}
        self.run(self._post_replicas(region, model, "/_radixfleet/faults", body, only=replica))

    def crash(
        self, region: str, model: str, *, replica: str, restart_after: float | None = None
    ) -> None:
        """Crash a replica (it drops connections; restarts after `restart_after` seconds)."""
        body = {"restart_after": restart_after}
        self.run(self._post_replicas(region, model, "/_radixfleet/crash", body, only=replica))

    async def _post_replicas(
        self, region: str, model: str, path: str, body: dict[str, Any], *, only: str | None
    ) -> None:
        assert self._session is not None
        targets = [r for r in self.scaler(region, model).replicas() if only in (None, r.id)]
        if only is not None and not targets:
            raise KeyError(f"no replica {only!r} of {model} in {region}")
        for replica in targets:
            async with self._session.post(replica.url + path, json=body) as answer:
                answer.raise_for_status()

    def stop_region(self, region: str) -> None:
        """Take a region down: its entry answers 503 and every model scales to zero."""
        runtime = self.regions[region]

        async def act() -> None:
            assert runtime.entry is not None
            runtime.entry.accepting = False
            for replica_set in runtime.sets.values():
                replica_set.scale_to(0)

        self.run(act())

    def start_region(self, region: str, *, wait: bool = True) -> None:
        """Bring a region back: its models return to their initial replica counts."""
        runtime = self.regions[region]
        for name, replica_set in runtime.sets.items():
            self.scale(region, name, replica_set.spec.replicas, wait=wait)
        assert runtime.entry is not None
        runtime.entry.accepting = True

    def events(self) -> list[tuple[str, str, ScaleEvent]]:
        """Every replica event so far, as (region, model, event), in time order."""
        out = [
            (region.spec.name, name, event)
            for region in self.regions.values()
            for name, replica_set in region.sets.items()
            for event in list(replica_set.events)
        ]
        return sorted(out, key=lambda item: item[2].at)

    # -- Prometheus ----------------------------------------------------------------------------

    @property
    def replica_targets_file(self) -> Path:
        """The file_sd file listing ready replicas with region, model and namespace labels."""
        return self.workdir / "scrape" / "replicas.json"

    @property
    def router_targets_file(self) -> Path:
        """The file_sd file listing the routers' metrics ports."""
        return self.workdir / "scrape" / "routers.json"

    def write_prometheus_config(self, *, rule_files: list[Path] | None = None) -> Path:
        """Write prometheus.yml scraping this fleet (every second) and return its path."""
        config = scrape_config(
            replica_targets=self.replica_targets_file,
            router_targets=self.router_targets_file,
            rule_files=rule_files,
        )
        path = self.workdir / "scrape" / "prometheus.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start_prometheus(self, *, rule_files: list[Path] | None = None) -> str | None:
        """Start Debian's Prometheus scraping the fleet; its URL, or None if not installed."""
        config = self.write_prometheus_config(rule_files=rule_files)
        data = self.workdir / "prometheus" / "data"
        self.prometheus = start_prometheus(
            supervisor=self.supervisor, config=config, data_dir=data, host=self.host
        )
        return None if self.prometheus is None else self.prometheus.url

    def _write_replica_targets(self) -> None:
        targets = [
            Target(_address(info.url), region.spec.name, name, rs.spec.namespace)
            for region in self.regions.values()
            for name, rs in region.sets.items()
            for info in rs.replicas()
            if info.state is ReplicaState.READY
        ]
        write_targets(self.replica_targets_file, targets)

    def _write_router_targets(self) -> None:
        targets = [
            Target(f"{self.host}:{router.prometheus_port}", region.spec.name, name, "default")
            for region in self.regions.values()
            for name, router in region.routers.items()
        ]
        write_targets(self.router_targets_file, targets)

    def _all_routers(self) -> Iterator[Router]:
        for region in self.regions.values():
            yield from region.routers.values()

    def _all_sets(self) -> Iterator[ReplicaSet]:
        for region in self.regions.values():
            yield from region.sets.values()


async def _settle(replica_set: ReplicaSet, target: int, *, timeout_s: float) -> bool:
    """Wait until exactly `target` replicas exist and all are ready."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        infos = replica_set.replicas()
        if len(infos) == target and all(i.state is ReplicaState.READY for i in infos):
            return True
        await asyncio.sleep(0.05)
    return False


def _address(url: str) -> str:
    return url.split("://", 1)[1]
