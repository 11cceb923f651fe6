"""A model's replicas in one region: emulated SGLang processes kept at a desired count.

`ReplicaSet` is the local fleet's `Scaler`, reconciling like a Deployment: it starts emulator
processes until the desired count serves, and takes the surplus down. A replica is READY only
once its `/health` answers 200 *and* the router lists it as a healthy worker, so a request
released on readiness is routed. Scale-down removes the replica from the router first, waits
for its running requests to finish (bounded), then stops the process: no request is cut. A
replica whose process dies is dropped from the router and replaced. A router whose process dies
is started again on its ports and given the ready replicas again, as a Deployment restarts a
router pod that then finds its workers through Kubernetes discovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import aiohttp

from radixfleet.labels import SERVING_POOL
from radixfleet.localfleet.prewarm import warm
from radixfleet.localfleet.procs import free_ports, stop_async
from radixfleet.localfleet.replica import (
    EmulatorLauncher,
    Replica,
    ReplicaRole,
    ReplicaStartError,
    ScaleEvent,
    is_healthy,
    queued_requests,
    wait_drained,
)
from radixfleet.localfleet.router import (
    WORKER_ID_SEPARATOR,
    RouterError,
    RouterGroup,
)
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.localfleet.spec import ModelSpec, revision_name
from radixfleet.prefixes import kv_blocks, prompt_blocks
from radixfleet.twin.interfaces import Prewarmer, Waiting

log = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 0.5  # also how soon a dead replica is noticed
RETRY_DELAY_S = 1.0  # after a failed start, before trying again
DRAIN_TIMEOUT_S = 30.0
WAIT_POLL_S = 1.0  # how often a warm-up looks for requests waiting on the serving replicas


class ReplicaSet:
    """The `Scaler` of one model in one region, backed by emulator processes."""

    def __init__(
        self,
        *,
        region: str,
        spec: ModelSpec,
        router: RouterGroup,
        launcher: EmulatorLauncher,
        session: aiohttp.ClientSession,
        on_change: Callable[[], None] = lambda: None,
        revision: str | None = None,
        warm_start: bool = True,
        prewarmer: Prewarmer | None = None,
        pool: str = SERVING_POOL,
        tag: str = "",
        role: ReplicaRole | None = None,
    ) -> None:
        self._region = region
        self.role = role
        self.spec = spec
        self.revision = revision or revision_name(spec.name, 1)
        self.pool = pool  # `baseline`: the stable revision's replicas beside a canary
        self.tag = (
            tag  # in its replicas' names, after the revision's: one set's apart from another's
        )
        # The first `spec.replicas` replicas skip the cold start: true of the fleet's initial
        # replicas (a cluster that was up before), not of a new revision's.
        self.warm_start = warm_start
        self.router = router
        self.launcher = launcher
        self.session = session
        self.on_change = on_change
        # What a new replica is sent before it takes traffic
        # (radixfleet/controllers/autoscale/prewarm).
        self.prewarmer = prewarmer
        self.events: list[ScaleEvent] = []
        self._desired = spec.replicas
        self._replicas: dict[str, Replica] = {}
        self._serial = 0
        self._kick = asyncio.Event()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake_at: float | None = None
        self._closing = False
        self._reviving: set[int] = set()  # router members being started again, by index
        self._unsynced: set[int] = set()  # router members that lost their workers

    # -- the Scaler port ---------------------------------------------------------------------

    @property
    def region(self) -> str:
        return self._region

    @property
    def model(self) -> str:
        return self.spec.name

    def desired(self) -> int:
        return self._desired

    def ready_count(self) -> int:
        return sum(r.state is ReplicaState.READY for r in self._replicas.values())

    def replicas(self) -> list[ReplicaInfo]:
        return [r.info() for r in self._replicas.values()]

    def scale_to(self, replicas: int) -> int:
        target = max(0, min(replicas, self.spec.max_replicas))
        if target > 0 and self._desired == 0 and self.ready_count() == 0:
            self._wake_at = time.time()
            self._event("wake")
        self._desired = target
        self._kick.set()
        return target

    def drain(self, replica_id: str) -> bool:
        replica = self._replicas.get(replica_id)
        if replica is None or replica.state is ReplicaState.STOPPING:
            return False
        self._desired = max(0, self._desired - 1)
        self._spawn(self._take_down(replica))
        return True

    def kill(self, replica_id: str) -> None:
        """SIGKILL a replica's process, as an OOM kill or a lost node would: no drain, no
        deregistering; the set notices on its next pass and replaces it."""
        self._replicas[replica_id].child.signal_group(signal.SIGKILL)

    def record_prompt(self, body: Mapping[str, Any]) -> None:
        """The entry routed `body` to this revision: count its prompt's prefixes."""
        if self.prewarmer is None:
            return
        blocks = prompt_blocks(body)
        if blocks:
            self.prewarmer.record(blocks, time.time())

    async def wait_ready(self, *, at_least: int = 1, timeout_s: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.ready_count() < at_least:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True

    # -- reconciling -------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile until `close`: replace dead replicas, start or stop to the desired count."""
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), RECONCILE_INTERVAL_S)
            self._kick.clear()
            if not self._closing:
                self._reap_exited()
                self._revive_routers()
                self._converge()

    def _converge(self) -> None:
        live = [r for r in self._replicas.values() if r.state is not ReplicaState.STOPPING]
        for _ in range(self._desired - len(live)):
            self._start_one()
        for replica in _victims(live, len(live) - self._desired):
            self._spawn(self._take_down(replica))

    def _start_one(self) -> None:
        self._serial += 1
        tag = f"{self.tag}-" if self.tag else ""
        name = f"{self.region}-{self.revision}-{tag}{self._serial}"
        host = self.launcher.host
        grpc = self.router.transport == "grpc"
        port, *others = free_ports(2 if grpc else 1, host)
        grpc_port = others[0] if grpc else None
        warm = self.warm_start and self._serial <= self.spec.replicas
        args, role = self.role.launch() if self.role is not None else ([], None)
        child = self.launcher.launch(
            name=name, port=port, model=self.spec, warm=warm, seed=self._serial,
            grpc_port=grpc_port, extra_args=args,
        )  # fmt: skip
        worker_url = self.router.worker_url(host=host, http_port=port, grpc_port=grpc_port)
        replica = Replica(
            id=name, url=f"http://{host}:{port}", worker_url=worker_url, child=child, role=role
        )
        self._replicas[name] = replica
        self._spawn(self._bring_up(replica))

    async def _bring_up(self, replica: Replica) -> None:
        timeout = self.launcher.fleet.replica_start_timeout_s
        try:
            await self._wait_healthy(replica, timeout_s=timeout)
            await self._prewarm(replica)
            # A new revision's router starts alongside its first replicas; usually long live.
            await self.router.wait_live(self.session, timeout_s=timeout)
            if self.role is not None:  # a decode replica waits for a prefill peer
                await asyncio.wait_for(self.role.before_register(), timeout)
            replica.worker_id = await self.router.add_worker(
                self.session, replica.worker_url, replica.role
            )
            if replica.state is not ReplicaState.STARTING:  # scaled down while registering
                await self._deregister(replica)
                return
            await self.router.wait_registered(self.session, replica.worker_url, timeout_s=timeout)
        except (ReplicaStartError, RouterError, aiohttp.ClientError, TimeoutError) as err:
            if replica.state is ReplicaState.STARTING:  # not a scale-down racing the start
                await self._fail(replica, str(err))
            return
        if replica.state is ReplicaState.STARTING:
            self._mark_ready(replica)

    async def _wait_healthy(self, replica: Replica, *, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not await is_healthy(self.session, replica.url):
            if not replica.child.alive():
                raise ReplicaStartError(f"{replica.id} exited: {replica.child.log_tail(500)}")
            if asyncio.get_running_loop().time() > deadline:
                raise ReplicaStartError(f"{replica.id} not healthy after {timeout_s:.0f} s")
            await asyncio.sleep(0.05)

    async def _prewarm(self, replica: Replica) -> None:
        """Send a healthy replica the revision's hottest prefixes before the router knows it,
        while the pre-warmer may hold it back: other replicas serve, no wake waits for this one,
        and their queues stay within the allowance
        (radixfleet/controllers/autoscale/prewarm.may_hold_back). A replica taken down mid-warm-up,
        or a replica set torn down, ends it too."""
        prewarmer = self.prewarmer
        if prewarmer is None:
            return
        warmup = prewarmer.warmup(
            kv_blocks=kv_blocks(self.launcher.kv_capacity_tokens(self.spec)),
            serving=len(self._ready()), waiting=await self._waiting(), now=time.time(),
        )  # fmt: skip
        if warmup is None:
            return
        started = time.time()
        warming = asyncio.ensure_future(warm(self.session, replica.url, warmup))
        try:
            while not warming.done():  # requests that come to wait end the warm-up
                await asyncio.wait({warming}, timeout=WAIT_POLL_S)
                if warming.done():
                    break
                needed = not prewarmer.holds_back(
                    serving=len(self._ready()), waiting=await self._waiting()
                )
                if needed or replica.state is not ReplicaState.STARTING:
                    warming.cancel()
        finally:  # cancelled itself (the replica set stopping): leave no warm-up behind
            if not warming.done():
                warming.cancel()
        if not warming.cancelled():
            detail = f"{warming.result()} of {len(warmup.prefixes)} prefixes"
        elif replica.state is ReplicaState.STARTING:
            detail = "ended: a request waited"
        else:
            detail = "ended: the replica was taken down"
        self._event("prewarmed", replica.id, seconds=time.time() - started, detail=detail)

    def _ready(self) -> list[Replica]:
        return [r for r in self._replicas.values() if r.state is ReplicaState.READY]

    async def _waiting(self) -> Waiting:
        """Requests held for a wake, and queued at the ready replicas (asked at once). A
        replica that cannot say counts as a held request, so that an unknown queue never lets
        a warm-up delay one."""
        queued = await asyncio.gather(
            *(queued_requests(self.session, r.url) for r in self._ready())
        )
        unknown = sum(q is None for q in queued)
        held = int(self._wake_at is not None) + unknown
        return Waiting(held=held, queued=sum(q for q in queued if q is not None))

    def _mark_ready(self, replica: Replica) -> None:
        replica.state, replica.ready_at = ReplicaState.READY, time.time()
        woken = self._wake_at is not None
        since = self._wake_at if self._wake_at is not None else replica.started_at
        self._event("woken" if woken else "ready", replica.id, seconds=replica.ready_at - since)
        self._wake_at = None
        self._notify()

    async def _fail(self, replica: Replica, reason: str) -> None:
        log.warning("replica %s failed to start: %s", replica.id, reason)
        self._event("failed", replica.id, detail=reason)
        await self._remove(replica)
        await asyncio.sleep(RETRY_DELAY_S)  # no hot loop of failing starts
        self._kick.set()

    async def _take_down(self, replica: Replica) -> None:
        if replica.state is ReplicaState.STOPPING:
            return
        replica.state = ReplicaState.STOPPING
        self._notify()
        await self._deregister(replica)
        await wait_drained(self.session, replica.url, timeout_s=DRAIN_TIMEOUT_S)
        await self._remove(replica)
        self._event("stopped", replica.id)

    async def _remove(self, replica: Replica) -> None:
        await self._deregister(replica)
        await stop_async(self.launcher.supervisor, replica.child, grace_s=5.0)
        self._replicas.pop(replica.id, None)
        self._notify()

    async def _deregister(self, replica: Replica) -> None:
        worker_id, replica.worker_id = replica.worker_id, None
        if worker_id is not None:
            with contextlib.suppress(RouterError, aiohttp.ClientError, TimeoutError):
                await self.router.remove_worker(self.session, worker_id)

    def _reap_exited(self) -> None:
        for replica in list(self._replicas.values()):
            if not replica.child.alive() and replica.state is ReplicaState.READY:
                self._event("exited", replica.id, detail=replica.child.log_tail(300))
                replica.state = ReplicaState.STOPPING
                self._spawn(self._remove(replica))

    def _revive_routers(self) -> None:
        for index, member in enumerate(self.router.members):
            if not member.child.alive():
                self._unsynced.add(index)
            if index in self._unsynced and index not in self._reviving:
                self._reviving.add(index)
                self._spawn(self._revive(index))

    async def _revive(self, index: int) -> None:
        member = self.router.members[index]
        try:
            if not member.child.alive():
                self._event("router-exited", member.child.name, detail=member.child.log_tail(300))
                member.respawn(self.launcher.supervisor)
            await member.wait_live(
                self.session, timeout_s=self.launcher.fleet.replica_start_timeout_s
            )
            await self._register_ready(index)
            self._unsynced.discard(index)
            self._event("router-restarted", member.child.name)
        except (RouterError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("router %s not back yet: %s", member.child.name, err)  # the next pass
        finally:
            self._reviving.discard(index)

    async def _register_ready(self, index: int) -> None:
        """Register every ready replica with router member `index`, which knows none of them."""
        member = self.router.members[index]
        ready = [r for r in self._replicas.values() if r.state is ReplicaState.READY]
        for replica in ready:
            worker_id = await member.add_worker(self.session, replica.worker_url, replica.role)
            if replica.worker_id is not None:
                replica.worker_id = _with_member_id(replica.worker_id, index, worker_id)
        timeout = self.launcher.fleet.replica_start_timeout_s
        for replica in ready:
            await member.wait_registered(self.session, replica.worker_url, timeout_s=timeout)

    # -- bookkeeping -------------------------------------------------------------------------

    def _notify(self) -> None:
        # Wake every waiter, then give later waiters a fresh event.
        self._changed.set()
        self._changed = asyncio.Event()
        self.on_change()

    def _event(self, kind: str, replica: str = "", **extra: Any) -> None:
        self.events.append(ScaleEvent(at=time.time(), kind=kind, replica=replica, **extra))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop reconciling and stop every replica at once (no drain: the fleet is going)."""
        self._closing = True
        self._kick.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        children = [r.child for r in self._replicas.values()]
        self.launcher.supervisor.stop_many(children, grace_s=0.0)
        self._replicas.clear()


def _with_member_id(worker_id: str, index: int, member_id: str) -> str:
    """A group's worker id (one id per member) with member `index`'s id replaced."""
    ids = worker_id.split(WORKER_ID_SEPARATOR)
    ids[index] = member_id
    return WORKER_ID_SEPARATOR.join(ids)


def _victims(live: list[Replica], count: int) -> list[Replica]:
    """Which replicas to take down: starting ones first (no cache yet), then the newest."""
    if count <= 0:
        return []
    ordered = sorted(live, key=lambda r: (r.state is ReplicaState.READY, -r.started_at, r.id))
    return ordered[:count]
