"""The SGLang gateway (PyPI `smg` 1.13.0) as a child process, and its worker API.

One router per model per region, started with no workers: replicas join and leave at runtime
through the gateway's own HTTP API (`POST /workers {"url"}` answers 202 with a worker id and
registers in the background; `GET /workers` lists them with their health; `DELETE
/workers/{id}` drains one and removes it). The gateway loads each worker's tokenizer from the
path the worker's model info names, the emulator's local tokenizer directory (`--tokenizer-path`
gives it the same one at start-up), so it never reaches for Hugging Face. On loopback its
control plane is open, as the local fleet's other processes are; the in-cluster router
(radixfleet/controllers/routers) is reachable only inside its namespace.
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from radixfleet.labels import SERVING_POOL
from radixfleet.localfleet.procs import Child, Supervisor
from radixfleet.localfleet.spec import WorkerTransport

DECISION_SERIES = re.compile(
    r'^smg_cache_aware_policy_branch_total\{branch="([a-z_]+)"\} ([0-9.e+]+)$', re.MULTILINE
)


def parse_decisions(metrics_text: str) -> dict[str, float]:
    """smg's cache-aware decisions by branch, read from its Prometheus exposition."""
    return {branch: float(value) for branch, value in DECISION_SERIES.findall(metrics_text)}


class RouterError(RuntimeError):
    """The router refused or failed an operation; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def router_command(
    *,
    host: str,
    port: int,
    prometheus_port: int,
    policy: str,
    tokenizer_dir: str,
    health_interval_s: int,
    transport: WorkerTransport = "http",
    pd: bool = False,
) -> list[str]:
    """The command line of one smg gateway; `pd`: in PD mode, for a prefill/decode pair (it
    starts with no worker too, and takes each with its role: `Router.add_worker`)."""
    # smg picks its router (HTTP or gRPC) from the workers it starts with; ours starts with none
    # and adds them later, so a gRPC router runs in its multi-router mode, which routes to a
    # worker of either kind (in the single-router mode gRPC workers register but are never used).
    modes = ["--enable-igw"] if transport == "grpc" else []
    if pd:
        modes = ["--pd-disaggregation"]
    return [
        sys.executable, "-m", "smg", "launch", *modes,
        "--host", host, "--port", str(port),
        "--policy", policy,
        "--tokenizer-path", tokenizer_dir,
        "--prometheus-host", host, "--prometheus-port", str(prometheus_port),
        "--health-check-interval-secs", str(health_interval_s),
        # Stopping a local fleet should not wait the default 180 s for streams to drain.
        "--shutdown-grace-period-secs", "1",
        "--log-level", "warn",
    ]  # fmt: skip


@dataclass(frozen=True)
class WorkerRole:
    """A P/D worker's role as smg's `POST /workers` takes it (tried on smg 1.13.0):
    `worker_type` (`regular`, `prefill`, `decode` or `encode`) and a prefill's
    `bootstrap_port`, which smg applies to encode and prefill workers only."""

    worker_type: Literal["prefill", "decode"]
    bootstrap_port: int | None = None

    def fields(self) -> dict[str, Any]:
        if self.bootstrap_port is None:
            return {"worker_type": self.worker_type}
        return {"worker_type": self.worker_type, "bootstrap_port": self.bootstrap_port}


@dataclass
class Router:
    """A started router: where it listens and how to manage its workers."""

    url: str
    prometheus_port: int
    child: Child
    revision: str  # the model revision whose replicas it routes to
    transport: WorkerTransport = "http"  # how it reaches its replicas
    pool: str = SERVING_POOL  # which of the revision's replicas: a baseline's router has its own
    argv: tuple[str, ...] = ()  # its command line, to start it again
    restarts: int = 0

    def respawn(self, supervisor: Supervisor) -> None:
        """Start the same smg again on the same ports, as a Deployment restarts a dead pod. It
        comes back with no worker: its replica set registers them again."""
        if not self.argv:
            raise RouterError(f"{self.child.name} has no command line to start again")
        self.restarts += 1
        log_path = self.child.log_path.with_suffix(f".restart-{self.restarts}.log")
        self.child = supervisor.spawn(self.child.name, self.argv, log_path=log_path)

    def worker_url(self, *, host: str, http_port: int, grpc_port: int | None) -> str:
        """The address this router registers a replica under."""
        if self.transport == "grpc":
            if grpc_port is None:
                raise RouterError("a gRPC router needs the replica's gRPC port")
            return f"grpc://{host}:{grpc_port}"
        return f"http://{host}:{http_port}"

    async def wait_live(self, session: aiohttp.ClientSession, *, timeout_s: float) -> None:
        """Return once `/liveness` answers 200; raise RouterError on exit or timeout."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not await _answers(session, f"{self.url}/liveness"):
            if not self.child.alive():
                raise RouterError(f"smg exited: {self.child.log_tail()}")
            if asyncio.get_running_loop().time() > deadline:
                raise RouterError(f"smg not live after {timeout_s:.0f} s")
            await asyncio.sleep(0.1)

    async def add_worker(
        self, session: aiohttp.ClientSession, worker_url: str, role: WorkerRole | None = None
    ) -> str:
        """Ask the router to register `worker_url` (in PD mode with its `role`); returns the
        worker id it assigned."""
        body = {"url": worker_url, **(role.fields() if role is not None else {})}
        async with session.post(f"{self.url}/workers", json=body) as answer:
            body = await _json(answer)
            if answer.status not in (200, 201, 202) or "worker_id" not in body:
                raise RouterError(f"add {worker_url}: {body}", status=answer.status)
            return str(body["worker_id"])

    async def remove_worker(self, session: aiohttp.ClientSession, worker_id: str) -> None:
        """Ask the router to drop a worker; an unknown id is already gone."""
        async with session.delete(f"{self.url}/workers/{worker_id}") as answer:
            if answer.status not in (200, 202, 204, 404):
                raise RouterError(
                    f"remove {worker_id}: {await answer.text()}", status=answer.status
                )

    async def workers(self, session: aiohttp.ClientSession) -> list[dict[str, Any]]:
        """The router's workers as it lists them (url, is_healthy, load, ...)."""
        async with session.get(f"{self.url}/workers") as answer:
            body = await _json(answer)
        workers = body.get("workers", [])
        return [w for w in workers if isinstance(w, dict)]

    async def decisions(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """smg's cache-aware decisions so far, by branch: `event_hit` and `event_miss` (the KV
        event index), `tree_match` (its approximate tree), `expected_wait_fallback` (no cache
        affinity: the least expected wait), ..."""
        url = f"{self.url.rsplit(':', 1)[0]}:{self.prometheus_port}/metrics"
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as answer:
            return parse_decisions(await answer.text())

    async def wait_registered(
        self, session: aiohttp.ClientSession, worker_url: str, *, timeout_s: float
    ) -> None:
        """Return once the router lists `worker_url` as healthy."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            listed = {w.get("url"): w for w in await self.workers(session)}
            if listed.get(worker_url, {}).get("is_healthy") is True:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise RouterError(f"{worker_url} not registered after {timeout_s:.0f} s")
            await asyncio.sleep(0.05)


# A worker registered with every member of a group has one id per member, joined by this.
WORKER_ID_SEPARATOR = ","


@dataclass
class RouterGroup:
    """One revision's router replicas (one or more smg processes), each with every worker.

    The entry spreads the revision's requests over `urls` (radixfleet/controllers/routers/README.md
    says how); the group registers, waits for and removes a replica on every member alike, so any
    member can serve any request. Over gRPC each member subscribes to every worker's KV events and
    holds the same exact index; over HTTP each member guesses on its own tree.
    """

    members: list[Router]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a router group needs at least one router")

    @property
    def url(self) -> str:
        """The group's name where one URL stands for it (the entry's drain count)."""
        return self.members[0].url

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(member.url for member in self.members)

    @property
    def revision(self) -> str:
        return self.members[0].revision

    @property
    def transport(self) -> WorkerTransport:
        return self.members[0].transport

    def worker_url(self, *, host: str, http_port: int, grpc_port: int | None) -> str:
        """The address every member registers a replica under."""
        return self.members[0].worker_url(host=host, http_port=http_port, grpc_port=grpc_port)

    async def wait_live(self, session: aiohttp.ClientSession, *, timeout_s: float) -> None:
        """Return once every member is live; raise RouterError as the first late one does."""
        await asyncio.gather(*(m.wait_live(session, timeout_s=timeout_s) for m in self.members))

    async def add_worker(
        self, session: aiohttp.ClientSession, worker_url: str, role: WorkerRole | None = None
    ) -> str:
        """Register `worker_url` with every member; the ids they assigned, as one id."""
        ids = await asyncio.gather(*(m.add_worker(session, worker_url, role) for m in self.members))
        return WORKER_ID_SEPARATOR.join(ids)

    async def remove_worker(self, session: aiohttp.ClientSession, worker_id: str) -> None:
        """Drop a worker from every member (`worker_id` as `add_worker` returned it)."""
        ids = worker_id.split(WORKER_ID_SEPARATOR)
        await asyncio.gather(
            *(m.remove_worker(session, i) for m, i in zip(self.members, ids, strict=False))
        )

    async def wait_registered(
        self, session: aiohttp.ClientSession, worker_url: str, *, timeout_s: float
    ) -> None:
        """Return once every member lists `worker_url` as healthy."""
        await asyncio.gather(
            *(m.wait_registered(session, worker_url, timeout_s=timeout_s) for m in self.members)
        )

    async def decisions(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """smg's cache-aware decisions by branch, summed over the members."""
        total: dict[str, float] = {}
        for counts in await asyncio.gather(*(m.decisions(session) for m in self.members)):
            for branch, count in counts.items():
                total[branch] = total.get(branch, 0.0) + count
        return total


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as answer:
            return answer.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _json(answer: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = await answer.json(content_type=None)
    except (aiohttp.ContentTypeError, ValueError):
        return {"error": await answer.text()}
    return body if isinstance(body, dict) else {"body": body}
