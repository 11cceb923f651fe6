"""The local fleet's core: its state, starting and stopping everything, the accessors tests
and controllers use, and the scrape targets it keeps current. The revisions, chaos and
monitoring parts of `LocalFleet` extend it (fleet.py); what its routers decided and its
replicas cached is read in monitoring.py."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import aiohttp
from aiohttp import web

from radixfleet.dataplane.gate import Gate
from radixfleet.dataplane.relay import entry_runner
from radixfleet.dataplane.signals import SignalsRelay
from radixfleet.emulator.tokenizer import ensure_tokenizer_dir
from radixfleet.labels import SERVING_POOL
from radixfleet.localfleet.entry import RegionEntry, RouterPool
from radixfleet.localfleet.lora import AdapterPlacer, adapter_routers
from radixfleet.localfleet.pairs import PairSet
from radixfleet.localfleet.procs import Supervisor, free_ports, stop_async
from radixfleet.localfleet.prometheus import (
    PrometheusServer,
    Target,
    write_targets,
)
from radixfleet.localfleet.replica import EmulatorLauncher, ReplicaRole, ScaleEvent
from radixfleet.localfleet.replicas import ReplicaSet
from radixfleet.localfleet.router import Router, RouterGroup, router_command
from radixfleet.localfleet.runtime import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    LocalFleetError,
    PrewarmerFactory,
    RegionRuntime,
    T,
    settle,
)
from radixfleet.localfleet.scaler import PairRule, ReplicaInfo, ReplicaState
from radixfleet.localfleet.spec import LocalFleetSpec, ModelSpec, revision_name
from radixfleet.profile import resolve_profile


class LocalFleetCore:
    """A local fleet's state, lifecycle and accessors; `LocalFleet` adds its other parts."""

    def __init__(
        self,
        spec: LocalFleetSpec,
        *,
        workdir: Path | None = None,
        cache_dir: Path | None = None,
        host: str = "127.0.0.1",
        gates: Mapping[str, Gate] | None = None,
        prewarmers: PrewarmerFactory | None = None,
        pair_rule: PairRule | None = None,
        adapter_placer: AdapterPlacer | None = None,
    ) -> None:
        self.spec = spec
        # By region: e.g. token budgets (radixfleet/controllers/quota/gate.py).
        self.gates = dict(gates or {})
        # Per region and model, what pre-warms its new replicas
        # (radixfleet/controllers/autoscale/prewarm).
        self.prewarmers = prewarmers
        # How a P/D model's two roles scale as one (radixfleet/controllers/autoscale/pairs.py).
        self.pair_rule = pair_rule
        # Where a LoRA model loads an adapter a request waits for (radixfleet/controllers/lora).
        self.adapter_placer = adapter_placer
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
                if model.disaggregation is not None and pair_rule is None:
                    raise LocalFleetError(
                        f"{region.name}/{model.name} is a prefill/decode pair: give the fleet "
                        "pair_rule=radixfleet.controllers.autoscale.pairs.pair_counts"
                    )

    def __enter__(self) -> Self:
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
                pd = model.disaggregation is not None
                region.routers[model.name] = self._spawn_router(region, revision, pd=pd)
        live = [r.wait_live(self._session, timeout_s=60) for r in self._all_routers()]
        await asyncio.gather(*live)

    def _spawn_router(
        self,
        region: RegionRuntime,
        revision: str,
        *,
        pool: str = SERVING_POOL,
        tag: str = "",
        pd: bool = False,
    ) -> RouterGroup:
        members = [
            self._spawn_one_router(region, revision, index, pool=pool, tag=tag, pd=pd)
            for index in range(region.spec.routers)
        ]
        return RouterGroup(members)

    def _spawn_one_router(
        self, region: RegionRuntime, revision: str, index: int, *, pool: str, tag: str, pd: bool
    ) -> Router:
        port, metrics_port = free_ports(2, self.host)
        # A P/D model's replicas are reached over HTTP: the emulator's roles serve no gRPC.
        transport = "http" if pd else region.spec.router_workers
        argv = router_command(
            host=self.host,
            port=port,
            prometheus_port=metrics_port,
            policy=region.spec.router_policy,
            tokenizer_dir=self._tokenizer_dir,
            health_interval_s=self.spec.router_health_interval_s,
            transport=transport,
            pd=pd,
        )
        name = f"router-{region.spec.name}-{revision}" + (f"-{tag}" if tag else "")
        name += f"-{index}" if index else ""
        child = self.supervisor.spawn(name, argv, log_path=self.workdir / "logs" / f"{name}.log")
        return Router(
            url=f"http://{self.host}:{port}",
            prometheus_port=metrics_port,
            child=child,
            revision=revision,
            transport=transport,
            argv=tuple(argv),
            pool=pool,
        )

    def _start_sets(self, region: RegionRuntime) -> None:
        for model in region.spec.models:
            router = region.routers[model.name]
            if model.disaggregation is not None:
                region.pairs[model.name] = self._pair_set(region, model, router)
                continue
            region.sets[model.name] = self._replica_set(
                region, model, router, warm_start=self.spec.initial_warm
            )

    def _pair_set(self, region: RegionRuntime, model: ModelSpec, router: RouterGroup) -> PairSet:
        """A P/D model's two roles, each a replica set registered with the one PD router."""
        assert self.pair_rule is not None

        def make_set(spec: ModelSpec, name: str, role: ReplicaRole) -> ReplicaSet:
            warm = self.spec.initial_warm
            return self._replica_set(region, spec, router, warm_start=warm, tag=name, role=role)

        return PairSet(model, make_set=make_set, rule=self.pair_rule, host=self.host)

    def _replica_set(
        self,
        region: RegionRuntime,
        model: ModelSpec,
        router: RouterGroup,
        *,
        warm_start: bool,
        pool: str = SERVING_POOL,
        tag: str = "",
        role: ReplicaRole | None = None,
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
            # A P/D role has nothing to warm (controllers/autoscale/prewarm.py: NOT_FOR_PD_ROLES).
            prewarmer=(
                self.prewarmers(region.spec.name, model)
                if self.prewarmers and role is None
                else None
            ),
            pool=pool,
            tag=tag,
            role=role,
        )
        self._tasks.append(asyncio.get_running_loop().create_task(replica_set.run()))
        return replica_set

    async def _start_entry(self, region: RegionRuntime, *, port: int = 0) -> None:
        assert self._session is not None
        region.entry = RegionEntry(
            region=region.spec.name,
            scalers={**region.sets, **region.pairs},
            routers={name: self._pool(region, group) for name, group in region.routers.items()},
            session=self._session,
            wake_timeout_s=self.spec.wake_timeout_s,
            retry_after_s=self.spec.retry_after_s,
            gate=self.gates.get(region.spec.name),
            signals=SignalsRelay(token=self.fleet_token, session=self._session),
            owners={model.name: model.tenants for model in region.spec.models if model.tenants},
            adapters=adapter_routers(
                region.spec.models, region.sets, session=self._session,
                placer=self.adapter_placer, load_timeout_s=self.spec.adapter_load_timeout_s,
                retry_after_s=self.spec.retry_after_s,
            ),
        )  # fmt: skip
        region.runner = entry_runner(region.entry.app, shutdown_timeout=1.0, access_log=None)
        await region.runner.setup()
        # reuse_port: a restarted entry listens beside the old one until that one has drained.
        site = web.TCPSite(region.runner, self.host, port, backlog=4096, reuse_port=True)
        await site.start()
        region.entry_url = f"http://{self.host}:{region.runner.addresses[0][1]}"

    async def _wait_initial_replicas(self) -> None:
        timeout = self.spec.replica_start_timeout_s
        waits = {
            (region.spec.name, name, rs.tag): rs.wait_ready(
                at_least=rs.spec.replicas, timeout_s=timeout
            )
            for region in self.regions.values()
            for name, rs in [*region.sets.items(), *region.role_sets()]
        }
        ready = await asyncio.gather(*waits.values())
        late = [key for key, ok in zip(waits, ready, strict=True) if not ok]
        if late:
            raise LocalFleetError(
                f"replicas not ready in {timeout:.0f} s: {late}; {self._failures()}"
            )

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
            raise LocalFleetError("the fleet is not started")
        return entry

    def scaler(self, region: str, model: str) -> ReplicaSet:
        """The `Scaler` of a model in a region; call its methods on the fleet's loop (`run`)."""
        return self.regions[region].sets[model]

    def pair(self, region: str, model: str) -> PairSet:
        """The `Scaler` of a P/D model in a region: its prefill and decode replica sets."""
        return self.regions[region].pairs[model]

    def scale(
        self, region: str, model: str, replicas: int, *, wait: bool = True, timeout_s: float = 120
    ) -> bool:
        """Ask for `replicas` (a P/D model's: pairs); with `wait`, return whether they were
        ready (or gone) in time."""
        runtime = self.regions[region]
        replica_set = runtime.pairs.get(model) or runtime.sets[model]

        async def act() -> bool:
            target = replica_set.scale_to(replicas)
            if not wait:
                return True
            return await settle(replica_set, target, timeout_s=timeout_s)

        return self.run(act(), timeout_s=timeout_s + 5)

    def ready_count(self, region: str, model: str) -> int:
        """Ready replicas of a model in a region (a P/D model's: pairs)."""
        runtime = self.regions[region]
        replica_set = runtime.pairs.get(model) or runtime.sets[model]

        async def read() -> int:
            return replica_set.ready_count()

        return self.run(read())

    def replicas(self, region: str, model: str) -> list[ReplicaInfo]:
        """The replicas of a model in a region (a P/D model's: both roles')."""
        runtime = self.regions[region]
        replica_set = runtime.pairs.get(model) or runtime.sets[model]

        async def read() -> list[ReplicaInfo]:
            return replica_set.replicas()

        return self.run(read())

    def events(self) -> list[tuple[str, str, ScaleEvent]]:
        """Every replica event so far, as (region, model, event), in time order."""
        out = [
            (region.spec.name, name, event)
            for region in self.regions.values()
            for name, replica_set in [*region.sets.items(), *region.role_sets()]
            for event in list(replica_set.events)
        ]
        return sorted(out, key=lambda item: item[2].at)

    @property
    def replica_targets_file(self) -> Path:
        """The file_sd file listing ready replicas with region, model and namespace labels."""
        return self.workdir / "scrape" / "replicas.json"

    @property
    def router_targets_file(self) -> Path:
        """The file_sd file listing the routers' metrics ports."""
        return self.workdir / "scrape" / "routers.json"

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
            yield from (replica_set for _, replica_set in region.role_sets())
            yield from (revision.replicas for revision in region.side_revisions())


def _address(url: str) -> str:
    return url.split("://", 1)[1]


def _router_address(host: str, router: Router) -> str:
    return f"{host}:{router.prometheus_port}"
