"""The local fleet: regions on loopback, each with an entry, a router per model and replicas.

`LocalFleet` runs its own event loop on a background thread: the region entries (aiohttp
servers in this process), the replica sets that reconcile emulator processes, and the HTTP
session they share. Routers, replicas and Prometheus are child processes under one
`Supervisor`, so `stop()` (or a signal, or interpreter exit) leaves nothing behind.

Its methods are thread-safe and synchronous, for tests, the demo and controllers that run
elsewhere; `run(coro)` runs a coroutine on the fleet's loop, where a controller can drive the
`Scaler`s (`scaler(region, model)`) directly.

Revisions stand in for KServe's: a model serves from its stable revision, and
`create_revision` starts a canary revision beside it (its own router and replicas, pinned at
0%) whose share of the entry's traffic `set_canary_percent` moves, as `canaryTrafficPercent`
does. `promote` makes the canary the stable revision and retires the old one; a rollback is
`set_canary_percent(..., 0)`, which keeps the canary's replicas, as KServe does.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import signal
import tempfile
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from aiohttp import web

from radixfleet.dataplane.relay import entry_runner
from radixfleet.dataplane.signals import PREFIX as SIGNALS_PREFIX
from radixfleet.dataplane.signals import SignalsRelay
from radixfleet.emulator.tokenizer import ensure_tokenizer_dir
from radixfleet.fleet.entry import Baseline, Canary, Gate, RegionEntry, RouterPool
from radixfleet.fleet.procs import Supervisor, free_ports, stop_async
from radixfleet.fleet.prometheus import (
    PrometheusServer,
    Target,
    scrape_config,
    start_prometheus,
    wait_scraped,
    write_targets,
)
from radixfleet.fleet.replicas import EmulatorLauncher, ReplicaSet, ScaleEvent
from radixfleet.fleet.router import Router, RouterGroup, router_command
from radixfleet.fleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.fleet.spec import FleetSpec, ModelSpec, RegionSpec, revision_name
from radixfleet.labels import BASELINE_POOL, SERVING_POOL
from radixfleet.profile import resolve_profile
from radixfleet.twin.interfaces import Prewarmer

T = TypeVar("T")
# (region, model) -> what pre-warms the model's new replicas there, or None.
PrewarmerFactory = Callable[[str, ModelSpec], Prewarmer | None]
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0


class FleetError(RuntimeError):
    """The fleet could not start (the message says which part and shows its log)."""


@dataclass(frozen=True)
class Revision:
    """One revision of a model in a region: its own router and replicas."""

    name: str
    router: RouterGroup
    replicas: ReplicaSet


@dataclass(frozen=True)
class RevisionStatus:
    """A model's revisions in a region, as KServe's predictor status would tell them."""

    stable: str
    canary: str | None
    canary_percent: int
    canary_ready: int
    baseline_ready: int | None = None  # the canary's baseline's ready replicas, while one runs

    @property
    def latest(self) -> str:
        """The newest revision: the canary while there is one."""
        return self.canary or self.stable


@dataclass
class RegionRuntime:
    """A started region: its entry, and per model its router and replica set."""

    spec: RegionSpec
    entry: RegionEntry | None = None
    entry_url: str = ""
    runner: web.AppRunner | None = None
    routers: dict[str, RouterGroup] = field(default_factory=dict)  # per model: the stable's
    sets: dict[str, ReplicaSet] = field(default_factory=dict)  # per model: the stable revision's
    canaries: dict[str, Revision] = field(default_factory=dict)
    baselines: dict[str, Revision] = field(default_factory=dict)  # the stable's, beside a canary
    retiring: list[Revision] = field(default_factory=list)  # draining, then stopped
    generations: dict[str, int] = field(default_factory=dict)  # per model: the newest revision
    baselines_started: int = 0

    def side_revisions(self) -> list[Revision]:
        """Every replica set beside the stable ones: canaries, baselines, those being retired."""
        return [*self.canaries.values(), *self.baselines.values(), *self.retiring]


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
        prewarmers: PrewarmerFactory | None = None,
    ) -> None:
        self.spec = spec
        # By region: e.g. token budgets (radixfleet/controllers/quota/gate.py).
        self.gates = dict(gates or {})
        # Per region and model, what pre-warms its new replicas
        # (radixfleet/controllers/autoscale/prewarm).
        self.prewarmers = prewarmers
        self.fleet_id = uuid.uuid4().hex
        self.host = host
        self.cache_dir = cache_dir
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="radixfleet-fleet-"))
        self.supervisor = Supervisor(marker=self.fleet_id)
        self.regions: dict[str, RegionRuntime] = {r.name: RegionRuntime(r) for r in spec.regions}
        self.prometheus: PrometheusServer | None = None
        self.region_prometheus: dict[str, PrometheusServer] = {}
        # What the failover shows each region's entry to read that region's Prometheus.
        self.fleet_token = secrets.token_urlsafe(32)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fleet", daemon=True)
        self._session: aiohttp.ClientSession | None = None
        self._launcher: EmulatorLauncher | None = None
        self._tokenizer_dir = ""
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
        self._tokenizer_dir = tokenizer_dir
        await self._start_routers()
        self._write_router_targets()
        self._launcher = EmulatorLauncher(
            supervisor=self.supervisor,
            fleet=self.spec,
            workdir=self.workdir,
            host=self.host,
            cache_dir=self.cache_dir,
        )
        for region in self.regions.values():
            self._start_sets(region)
            await self._start_entry(region)
        await self._wait_initial_replicas()

    async def _start_routers(self) -> None:
        assert self._session is not None
        for region in self.regions.values():
            for model in region.spec.models:
                region.generations[model.name] = 1
                revision = revision_name(model.name, 1)
                region.routers[model.name] = self._spawn_router(region, revision)
        live = [r.wait_live(self._session, timeout_s=60) for r in self._all_routers()]
        await asyncio.gather(*live)

    def _spawn_router(
        self, region: RegionRuntime, revision: str, *, pool: str = SERVING_POOL, tag: str = ""
    ) -> RouterGroup:
        members = [
            self._spawn_one_router(region, revision, index, pool=pool, tag=tag)
            for index in range(region.spec.routers)
        ]
        return RouterGroup(members)

    def _spawn_one_router(
        self, region: RegionRuntime, revision: str, index: int, *, pool: str, tag: str
    ) -> Router:
        port, metrics_port = free_ports(2, self.host)
        argv = router_command(
            host=self.host,
            port=port,
            prometheus_port=metrics_port,
            policy=region.spec.router_policy,
            tokenizer_dir=self._tokenizer_dir,
            health_interval_s=self.spec.router_health_interval_s,
            transport=region.spec.router_workers,
        )
        name = f"router-{region.spec.name}-{revision}" + (f"-{tag}" if tag else "")
        name += f"-{index}" if index else ""
        child = self.supervisor.spawn(name, argv, log_path=self.workdir / "logs" / f"{name}.log")
        return Router(
            url=f"http://{self.host}:{port}",
            prometheus_port=metrics_port,
            child=child,
            revision=revision,
            transport=region.spec.router_workers,
            argv=tuple(argv),
            pool=pool,
        )

    def _start_sets(self, region: RegionRuntime) -> None:
        for model in region.spec.models:
            router = region.routers[model.name]
            region.sets[model.name] = self._replica_set(
                region, model, router, warm_start=self.spec.initial_warm
            )

    def _replica_set(
        self,
        region: RegionRuntime,
        model: ModelSpec,
        router: RouterGroup,
        *,
        warm_start: bool,
        pool: str = SERVING_POOL,
        tag: str = "",
    ) -> ReplicaSet:
        """A reconciling replica set of one revision (the router's), running from now on."""
        assert self._session is not None and self._launcher is not None
        replica_set = ReplicaSet(
            region=region.spec.name,
            spec=model,
            router=router,
            launcher=self._launcher,
            session=self._session,
            on_change=self._write_replica_targets,
            revision=router.revision,
            warm_start=warm_start,
            prewarmer=self.prewarmers(region.spec.name, model) if self.prewarmers else None,
            pool=pool,
            tag=tag,
        )
        self._tasks.append(asyncio.get_running_loop().create_task(replica_set.run()))
        return replica_set

    async def _start_entry(self, region: RegionRuntime, *, port: int = 0) -> None:
        assert self._session is not None
        region.entry = RegionEntry(
            region=region.spec.name,
            scalers=region.sets,
            routers={name: self._pool(region, group) for name, group in region.routers.items()},
            session=self._session,
            wake_timeout_s=self.spec.wake_timeout_s,
            retry_after_s=self.spec.retry_after_s,
            gate=self.gates.get(region.spec.name),
            signals=SignalsRelay(token=self.fleet_token, session=self._session),
        )
        region.runner = entry_runner(region.entry.app, shutdown_timeout=1.0, access_log=None)
        await region.runner.setup()
        # reuse_port: a restarted entry listens beside the old one until that one has drained.
        site = web.TCPSite(region.runner, self.host, port, backlog=4096, reuse_port=True)
        await site.start()
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
        revision: str | None = None,
        hung: bool = False,
        slowdown: float = 1.0,
        error_rate: float = 0.0,
    ) -> None:
        """Inject faults (emulator faults API) in one replica, or in every replica of the model's
        stable revision, or of `revision`."""
        body = {"hung": hung, "slowdown": slowdown, "error_rate": error_rate}
        self.run(
            self._post_replicas(
                region, model, "/_radixfleet/faults", body, only=replica, revision=revision
            )
        )

    def crash(
        self, region: str, model: str, *, replica: str, restart_after: float | None = None
    ) -> None:
        """Crash a replica (it drops connections; restarts after `restart_after` seconds)."""
        body = {"restart_after": restart_after}
        self.run(self._post_replicas(region, model, "/_radixfleet/crash", body, only=replica))

    async def _post_replicas(
        self,
        region: str,
        model: str,
        path: str,
        body: dict[str, Any],
        *,
        only: str | None,
        revision: str | None = None,
    ) -> None:
        assert self._session is not None
        replica_set = self._revision_set(region, model, revision)
        targets = [r for r in replica_set.replicas() if only in (None, r.id)]
        if only is not None and not targets:
            raise KeyError(f"no replica {only!r} of {model} in {region}")
        for replica in targets:
            async with self._session.post(replica.url + path, json=body) as answer:
                answer.raise_for_status()

    def _revision_set(self, region: str, model: str, revision: str | None) -> ReplicaSet:
        stable = self.scaler(region, model)
        if revision is None or revision == stable.revision:
            return stable
        canary = self.regions[region].canaries.get(model)
        if canary is None or canary.name != revision:
            raise KeyError(f"no revision {revision!r} of {model} in {region}")
        return canary.replicas

    # -- chaos: what goes wrong in a real fleet ---------------------------------------------

    def kill_replica(self, region: str, model: str, replica: str) -> None:
        """SIGKILL one replica's process (an OOM kill, a lost node); its set replaces it."""
        self.run(_call(lambda: self.scaler(region, model).kill(replica)))

    def kill_router(self, region: str, model: str, *, member: int = 0) -> None:
        """SIGKILL one of the model's stable routers; its replica set starts it again."""
        self.regions[region].routers[model].members[member].child.signal_group(signal.SIGKILL)

    def restart_entry(self, region: str) -> None:
        """Restart `region`'s entry as a Deployment's rolling update does: a new entry listens
        on the same address first (SO_REUSEPORT, as a surge pod joins the Service), then the old
        one stops accepting, lets the requests it holds finish (up to STOP_TIMEOUT_S), and goes.
        What the new entry knows of routers and canary splits is what an entry in a cluster
        reads again from the InferenceServices; the gate (token budgets) is the same object, so
        its ledger survives here, where a new entry pod would start its buckets full (at most
        one burst above the budget)."""
        self.run(self._restart_entry(self.regions[region]), timeout_s=STOP_TIMEOUT_S * 2)

    async def _restart_entry(self, region: RegionRuntime) -> None:
        old, old_runner = region.entry, region.runner
        assert old is not None and old_runner is not None
        await self._start_entry(region, port=old_runner.addresses[0][1])
        assert region.entry is not None
        region.entry.scalers, region.entry.routers = old.scalers, old.routers
        region.entry.canaries, region.entry.accepting = old.canaries, old.accepting
        for site in list(old_runner.sites):
            await site.stop()  # no new connection; requests already held carry on
        await _until(lambda: sum(old.in_flight.values()) == 0, timeout_s=STOP_TIMEOUT_S)
        await old_runner.cleanup()

    def stop_prometheus(self) -> None:
        """Stop the fleet's Prometheus (its data stays); `start_prometheus_again` brings it back."""
        assert self.prometheus is not None, "no Prometheus was started"
        self.prometheus.stop(self.supervisor)

    def start_prometheus_again(self) -> None:
        """Start the fleet's Prometheus again, on its address and storage."""
        assert self.prometheus is not None, "no Prometheus was started"
        self.prometheus.start_again(self.supervisor)

    # -- revisions (KServe's canaryTrafficPercent, played by the entry) --------------------------

    def create_revision(
        self,
        region: str,
        model: str,
        *,
        replicas: int | None = None,
        wait: bool = True,
        timeout_s: float = 120.0,
    ) -> str:
        """Start a new revision of `model` beside the stable one, at 0% of its traffic.

        It gets its own router and `replicas` replicas (default: the model's initial count),
        which start cold, as a new Knative revision's pods do. A canary not yet promoted is
        replaced: it is retired. Returns the new revision's name; with `wait`, once its
        replicas are ready.
        """
        work = self._create_revision(region, model, replicas=replicas)
        name, replica_set = self.run(work, timeout_s=60)
        if wait:
            at_least = replica_set.spec.replicas
            ready = self.run(replica_set.wait_ready(at_least=at_least, timeout_s=timeout_s))
            if not ready:
                raise FleetError(f"{name} not ready in {timeout_s:.0f} s; {self._failures()}")
        return name

    async def _create_revision(
        self, region_name: str, model: str, *, replicas: int | None
    ) -> tuple[str, ReplicaSet]:
        assert self._session is not None
        region = self.regions[region_name]
        spec = region.spec.model(model)
        if replicas is not None:
            spec = spec.model_copy(update={"replicas": replicas})
        region.generations[model] += 1
        # The router starts while the replicas do; they register once it is live.
        router = self._spawn_router(region, revision_name(model, region.generations[model]))
        replica_set = self._replica_set(region, spec, router, warm_start=False)
        previous = region.canaries.pop(model, None)
        if previous is not None:
            self._retire(region, previous)
        region.canaries[model] = Revision(router.revision, router, replica_set)
        entry = self.entry(region_name)
        baseline = entry.canaries[model].baseline if model in entry.canaries else None
        entry.canaries[model] = Canary(
            router.revision, self._pool(region, router), replica_set, baseline=baseline
        )
        self._write_router_targets()
        return router.revision, replica_set

    def set_canary_percent(self, region: str, model: str, percent: int) -> None:
        """Give the canary revision `percent` of the model's requests (0 rolls it back)."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be within 0..100, got {percent}")

        async def act() -> None:
            canary = self.entry(region).canaries.get(model)
            if canary is None:
                raise KeyError(f"{model} in {region} has no canary revision")
            canary.percent = percent

        self.run(act())

    def promote(self, region: str, model: str) -> None:
        """All traffic to the canary, which becomes the stable revision; retire the old one."""

        async def act() -> None:
            runtime = self.regions[region]
            canary = runtime.canaries.pop(model)
            self.entry(region).promote(model)
            router = runtime.routers[model]
            old = Revision(router.revision, router, runtime.sets[model])
            runtime.routers[model], runtime.sets[model] = canary.router, canary.replicas
            self._retire(runtime, old)
            baseline = runtime.baselines.pop(model, None)  # the old revision's too
            if baseline is not None:
                self._retire(runtime, baseline)

        self.run(act())

    def set_baseline(self, region: str, model: str, replicas: int) -> int:
        """Run `replicas` replicas of `model`'s stable revision as its canary's baseline, behind
        a router of their own (0 stops it); returns how many of them are ready.

        The entry sends the baseline as much as the canary once one of them is ready; their
        metrics carry the stable revision's name and `pool="baseline"`. They start cold, as the
        canary's did, so the two are compared at the same load and from the same start.
        """
        if replicas < 0:
            raise ValueError(f"replicas must be at least 0, got {replicas}")
        return self.run(self._set_baseline(region, model, replicas), timeout_s=60)

    async def _set_baseline(self, region_name: str, model: str, replicas: int) -> int:
        region = self.regions[region_name]
        entry = self.entry(region_name)
        running = region.baselines.get(model)
        if replicas == 0:
            if running is not None:
                if model in entry.canaries:
                    entry.canaries[model].baseline = None
                self._retire(region, region.baselines.pop(model))
            return 0
        if model not in entry.canaries:
            raise KeyError(f"{model} in {region_name} has no canary for a baseline to stand beside")
        if running is None:
            running = self._start_baseline(region, model, replicas)
            entry.canaries[model].baseline = Baseline(
                self._pool(region, running.router), running.replicas
            )
        running.replicas.scale_to(replicas)
        return running.replicas.ready_count()

    def _start_baseline(self, region: RegionRuntime, model: str, replicas: int) -> Revision:
        stable = region.sets[model].revision
        spec = region.spec.model(model).model_copy(update={"replicas": replicas})
        # Each baseline's processes are named apart: the last one may still be draining.
        region.baselines_started += 1
        tag = f"{BASELINE_POOL}{region.baselines_started}"
        router = self._spawn_router(region, stable, pool=BASELINE_POOL, tag=tag)
        replica_set = self._replica_set(
            region, spec, router, warm_start=False, pool=BASELINE_POOL, tag=tag
        )
        region.baselines[model] = Revision(stable, router, replica_set)
        self._write_router_targets()
        return region.baselines[model]

    def revisions(self, region: str, model: str) -> RevisionStatus:
        """The model's stable and canary revisions, and the canary's share and readiness."""

        async def read() -> RevisionStatus:
            runtime = self.regions[region]
            canary = runtime.canaries.get(model)
            baseline = runtime.baselines.get(model)
            split = self.entry(region).canaries.get(model)
            return RevisionStatus(
                stable=runtime.sets[model].revision,
                canary=None if canary is None else canary.name,
                canary_percent=0 if split is None else split.percent,
                canary_ready=0 if canary is None else canary.replicas.ready_count(),
                baseline_ready=None if baseline is None else baseline.replicas.ready_count(),
            )

        return self.run(read())

    def _retire(self, region: RegionRuntime, revision: Revision) -> None:
        """Stop a revision the entry no longer routes to, once no request to it is left."""
        region.retiring.append(revision)
        entry = self.entry(region.spec.name)

        async def retire() -> None:
            # Requests already sent to its router must find its replicas there: scaling down
            # first deregisters them, and the router would answer 503 with no worker left.
            await _until(lambda: entry.in_flight_by_router[revision.router.url] == 0,
                         timeout_s=STOP_TIMEOUT_S)  # fmt: skip
            revision.replicas.scale_to(0)
            await _settle(revision.replicas, 0, timeout_s=STOP_TIMEOUT_S)
            await revision.replicas.close()
            await asyncio.gather(*(stop_async(self.supervisor, member.child, grace_s=3.0)
                                   for member in revision.router.members))  # fmt: skip
            region.retiring.remove(revision)
            self._write_replica_targets()
            self._write_router_targets()

        self._tasks.append(asyncio.get_running_loop().create_task(retire()))

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

    def routing_decisions(self) -> dict[str, dict[str, float]]:
        """Per `region/model`, the stable router's cache-aware decisions so far, by branch."""
        assert self._session is not None
        session = self._session

        async def read() -> dict[str, dict[str, float]]:
            return {
                f"{region.spec.name}/{model}": await router.decisions(session)
                for region in self.regions.values()
                for model, router in region.routers.items()
            }

        return self.run(read(), timeout_s=30)

    def router_decisions(self, region: str, model: str) -> list[dict[str, float]]:
        """The stable revision's cache-aware decisions so far, one dict per router replica."""
        assert self._session is not None
        session, group = self._session, self.regions[region].routers[model]

        async def read() -> list[dict[str, float]]:
            return [await member.decisions(session) for member in group.members]

        return self.run(read(), timeout_s=30)

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

    def write_prometheus_config(
        self, *, rule_files: list[Path] | None = None, region: str | None = None
    ) -> Path:
        """Write prometheus.yml scraping this fleet (every second), or only `region` of it, and
        return its path."""
        config = scrape_config(
            replica_targets=self.replica_targets_file,
            router_targets=self.router_targets_file,
            rule_files=rule_files,
            region=region,
        )
        path = self.workdir / "scrape" / f"prometheus{'-' + region if region else ''}.yml"
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

    def start_region_prometheus(self, region: str) -> str | None:
        """Start a Prometheus of `region`'s own targets and relay it through that region's
        entry (`signals_url`), as each region of a deployed fleet has its own; its URL, or
        None when Prometheus is not installed."""
        runtime = self.regions[region]
        config = self.write_prometheus_config(region=region)
        data = self.workdir / f"prometheus-{region}" / "data"
        server = start_prometheus(
            supervisor=self.supervisor, config=config, data_dir=data, host=self.host
        )
        if server is None:
            return None
        own_routers = [r for name, _, r in self._routers_by_model() if name == region]
        ready = [i for rs in runtime.sets.values() for i in rs.replicas()
                 if i.state is ReplicaState.READY]  # fmt: skip
        wait_scraped(server, targets=len(own_routers) + len(ready))
        self.region_prometheus[region] = server
        if runtime.entry is not None and runtime.entry.signals is not None:
            runtime.entry.signals.prometheus_url = server.url
        return server.url

    def signals_url(self, region: str) -> str:
        """Where the failover reads `region`'s Prometheus: its entry, with `fleet_token`."""
        return self.entry_url(region) + SIGNALS_PREFIX

    def _write_replica_targets(self) -> None:
        targets = [
            Target(_address(info.url), rs.region, rs.model, rs.spec.namespace, rs.revision, rs.pool)
            for rs in self._all_sets()
            for info in rs.replicas()
            if info.state is ReplicaState.READY
        ]
        write_targets(self.replica_targets_file, targets)

    def _write_router_targets(self) -> None:
        targets = [
            Target(
                _router_address(self.host, router),
                region,
                model,
                "default",
                router.revision,
                router.pool,
            )
            for region, model, router in self._routers_by_model()
        ]
        write_targets(self.router_targets_file, targets)

    def _routers_by_model(self) -> Iterator[tuple[str, str, Router]]:
        """(region, model, router) of every revision's router replicas."""
        for region in self.regions.values():
            for model, group in region.routers.items():
                yield from ((region.spec.name, model, r) for r in group.members)
            for revision in region.side_revisions():
                model = revision.replicas.model
                yield from ((region.spec.name, model, r) for r in revision.router.members)

    def _all_routers(self) -> Iterator[Router]:
        yield from (router for _, _, router in self._routers_by_model())

    @staticmethod
    def _pool(region: RegionRuntime, group: RouterGroup) -> RouterPool:
        return RouterPool(group.urls, spread=region.spec.router_spread)

    def _all_sets(self) -> Iterator[ReplicaSet]:
        for region in self.regions.values():
            yield from region.sets.values()
            yield from (revision.replicas for revision in region.side_revisions())


async def _call(work: Callable[[], None]) -> None:
    """Run `work` on the fleet's loop (what the replica sets touch lives there)."""
    work()


async def _until(done: Callable[[], bool], *, timeout_s: float) -> bool:
    """Wait until `done()` holds, polling; False on timeout."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not done():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


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


def _router_address(host: str, router: Router) -> str:
    return f"{host}:{router.prometheus_port}"
