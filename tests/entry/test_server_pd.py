"""The region entry serving a prefill/decode model: one name, one real smg 1.13.0 in PD mode
(`--pd-disaggregation`) before an emulated prefill and decode replica, both roles woken before
the router is offered a request.

What runs for real: the entry, smg in PD mode (its `no_available_workers` answer with no
prefill, its dispatch to both roles with a bootstrap room), the emulated roles (the decode
fetches the room from the prefill's bootstrap server). What stands in: Knative's activator, as a
server that answers each role revision's `GET /health` once it has "started" that role, which it
does by registering the role's replica with smg as smg's Kubernetes discovery would on a ready
pod (tests/cluster/ runs the real one).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from radixfleet import dataplane
from radixfleet.dataplane.routes import Target, build_routes
from radixfleet.emulator.bootstrap import DisaggConfig
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.entry.server import ClusterEntry, Upstreams
from radixfleet.localfleet.procs import free_ports
from radixfleet.profile import ReplicaProfile
from tests.entry.test_server import DATA_PLANE_KEY, _chat, _gate, _post, _smg, _workers

pytestmark = pytest.mark.fleet
KEY = dataplane.bearer(DATA_PLANE_KEY)
MODEL = "big-pd"
REVISIONS = {"prefill": "big-pd-prefill-predictor-00001",
             "decode": "big-pd-decode-predictor-00001"}  # fmt: skip


@dataclass
class Pair:
    router: str
    prefill: RunningEmulator
    decode: RunningEmulator

    def role(self, revision: str) -> tuple[str, dict[str, Any]]:
        """The replica of a role's revision, and how smg registers it."""
        if revision == REVISIONS["decode"]:
            return self.decode.url, {"worker_type": "decode"}
        assert self.prefill.emulator.role is not None
        assert self.prefill.emulator.role.bootstrap is not None
        port = self.prefill.emulator.role.bootstrap.port
        return self.prefill.url, {"worker_type": "prefill", "bootstrap_port": port}


@pytest.fixture(scope="module")
def pair(tokenizer: EmulatorTokenizer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    profile = ReplicaProfile().scaled(time_factor=0.01)
    roles = [DisaggConfig("prefill", 0), DisaggConfig("decode", room_timeout_s=10.0)]
    configs = [EmulatorConfig(profile=profile, port=0, warm=True, served_model_name=MODEL,
                              api_key=DATA_PLANE_KEY, disaggregation=r) for r in roles]  # fmt: skip
    port, metrics = free_ports(2)
    log = tmp_path_factory.mktemp("smg-pd") / "router.log"
    with (
        serve_in_thread(configs[0], tokenizer=tokenizer) as prefill,
        serve_in_thread(configs[1], tokenizer=tokenizer) as decode,
    ):
        router = _smg(port, metrics, [], log, extra=["--pd-disaggregation"])
        try:
            url = f"http://127.0.0.1:{port}"
            _wait(lambda: _workers(url) == 0, router)
            yield Pair(url, prefill, decode)
        finally:
            router.terminate()
            router.wait(timeout=15)


def _wait(ready: Any, router: Any) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert router.poll() is None, "smg exited"
        assert time.monotonic() < deadline, "smg did not come up"
        time.sleep(0.2)


@dataclass
class Activator:
    """Knative's activator for the pair's revisions: a wake registers the role with smg."""

    pair: Pair
    session: aiohttp.ClientSession
    starts: frozenset[str] = frozenset(REVISIONS.values())  # what it can bring up
    woken: list[str] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)
    starting: int = 0  # registrations under way (a wake the entry gave up on still lands)

    async def health(self, request: web.Request) -> web.StreamResponse:
        revision = request.headers["Knative-Serving-Revision"]
        self.woken.append(revision)
        if revision not in self.starts:
            return web.json_response({"error": "no pod"}, status=503)
        if revision not in self.ids:
            self.starting += 1
            try:
                await self._start(revision)
            finally:
                self.starting -= 1
        return web.Response(text="")

    async def _start(self, revision: str) -> None:
        if revision not in self.ids:
            url, role = self.pair.role(revision)
            # smg's discovery gives a pod the router's key; a worker added by hand names it.
            body = {"url": url, "api_key": DATA_PLANE_KEY, **role}
            async with self.session.post(f"{self.pair.router}/workers", json=body,
                                         headers=KEY) as answer:  # fmt: skip
                found = await answer.json()
                assert "worker_id" in found, found
                self.ids[revision] = found["worker_id"]

    async def sleep(self) -> None:
        """Both roles to zero: smg loses its workers, as its discovery does when pods go. smg
        adds a worker in a job after it answered, and refuses a removal before that job is
        done, so each removal is asked again until smg lists no worker."""
        await _until(lambda: self.starting == 0)
        for _ in range(150):
            for worker_id in self.ids.values():
                async with self.session.delete(
                    f"{self.pair.router}/workers/{worker_id}", headers=KEY
                ):
                    pass
            if await asyncio.to_thread(_listed, self.pair.router) == 0:
                self.ids.clear()
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"smg kept workers {self.ids} for 30 s")


def _listed(router: str) -> int:
    """How many workers smg lists, healthy or not (a removal is a job it runs later)."""
    request = urllib.request.Request(f"{router}/workers", headers=KEY)
    with urllib.request.urlopen(request, timeout=5) as answer:
        return len(json.loads(answer.read())["workers"])


async def _until(ready: Any) -> None:
    for _ in range(150):
        if await asyncio.to_thread(ready):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("not reached in 30 s")


@dataclass
class PairUpstreams(Upstreams):
    router_url: str = ""
    knative_url: str = ""

    def router(self, target: Target) -> str:
        assert target.revision == MODEL, "only the pair's router is ever asked"
        return self.router_url

    def knative(self, target: Target) -> str:
        assert target.revision in REVISIONS.values(), "only the roles' revisions are woken"
        return self.knative_url


def _pd_isvc(role: str) -> dict[str, Any]:
    traffic = [{"revisionName": REVISIONS[role], "percent": 100}]
    return {"metadata": {"name": f"{MODEL}-{role}", "namespace": "team-blue",
                         "labels": {"radixfleet.io/model": MODEL, "radixfleet.io/pd-role": role}},
            "status": {"components": {"predictor": {"traffic": traffic}}}}  # fmt: skip


@asynccontextmanager
async def _entry(
    pair: Pair, *, starts: frozenset[str] = frozenset(REVISIONS.values()), wake_s: float = 60
) -> AsyncIterator[tuple[str, Activator]]:
    async with aiohttp.ClientSession() as session:
        activator = Activator(pair, session, starts=starts)
        stand_in = web.Application()
        stand_in.add_routes([web.get("/health", activator.health)])
        async with TestServer(stand_in) as knative:
            knative_url = str(knative.make_url("")).rstrip("/")
            upstreams = PairUpstreams(router_url=pair.router, knative_url=knative_url)
            gate = _gate()
            entry = ClusterEntry(gate=gate, session=session, upstreams=upstreams,
                                 wake_timeout_s=wake_s)  # fmt: skip
            entry.keys = {"team-blue": {dataplane.KEY: DATA_PLANE_KEY}}
            entry.routes = build_routes(gate.sync(), [_pd_isvc("prefill"), _pd_isvc("decode")])
            async with TestServer(entry.app()) as server:
                try:
                    yield str(server.make_url("")).rstrip("/"), activator
                finally:
                    await activator.sleep()


def _generated(replica: RunningEmulator) -> int:
    stats = replica.emulator.model.stats(replica.emulator.driver.now())
    return stats.counters.generation_tokens_total


def test_a_pair_at_zero_wakes_both_roles_and_its_router_answers(pair: Pair) -> None:
    """Asleep, woken, asleep again, woken again: each request is answered by the decode after
    the prefill, through the pair's router, and only once both roles were woken."""

    async def go() -> list[tuple[int, dict[str, str], str, list[str]]]:
        answers = []
        async with _entry(pair) as (url, activator):
            for _ in range(2):
                status, headers, body = await _post(url, "sk-blue", _chat(MODEL))
                answers.append((status, headers, body, sorted(activator.woken)))
                activator.woken.clear()
                await activator.sleep()
        return answers

    decoded = _generated(pair.decode)
    answers = asyncio.run(go())
    for status, headers, body, woken in answers:
        assert status == 200, body
        assert headers["x-radixfleet-path"] == "router"
        assert headers["x-radixfleet-revision"] == f"team-blue/{MODEL}"
        # Both roles woken, and again before each offer to the router until it takes one.
        assert sorted(set(woken)) == sorted(REVISIONS.values()), "both roles woken"
    assert _generated(pair.decode) - decoded == 2 * _chat(MODEL)["max_tokens"]


def test_a_pair_whose_prefill_does_not_wake_is_never_half_served(pair: Pair) -> None:
    """With only its decode up, the router takes nothing: the caller is told to come back."""

    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(pair, starts=frozenset({REVISIONS["decode"]}), wake_s=3) as (url, _):
            return await _post(url, "sk-blue", _chat(MODEL))

    decoded = _generated(pair.decode)
    status, headers, body = asyncio.run(go())
    assert status == 503, body
    assert int(headers["Retry-After"]) > 0
    assert _generated(pair.decode) == decoded, "no decode ran without its prefill"


def test_the_halves_of_a_pair_are_no_models_of_their_own(pair: Pair) -> None:
    async def go() -> list[int]:
        async with _entry(pair) as (url, activator):
            found = [(await _post(url, "sk-blue", _chat(f"{MODEL}-{role}")))[0]
                     for role in ("prefill", "decode")]  # fmt: skip
            assert activator.woken == []
            return found

    assert asyncio.run(go()) == [404, 404]
