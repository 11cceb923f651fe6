"""A LoRA model's adapter requests through the local fleet's entry, against stand-in replicas that
answer SGLang 0.5.23's adapter API as its http_server.py does (load and unload by name, a bound
on adapters held, 400 for a request naming an adapter not loaded), and the LoRA controller's
own placer and pass. tests/localfleet/test_lora_fleet.py runs the same path on the real smg and
emulated replicas.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from radixfleet.controllers.lora.localfleet import LocalFleetAdapterPlacer, LocalFleetAdapters
from radixfleet.controllers.lora.spec import AdapterPolicy
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.localfleet.entry import RegionEntry
from radixfleet.localfleet.lora import AdapterAction, AdapterRouter
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.localfleet.spec import LoraAdapterSpec, ModelSpec

MODEL = "lora-8b"
SUPPORT = {"Authorization": "Bearer key-support"}
SEARCH = {"Authorization": "Bearer key-search"}


class StandInReplica:
    """SGLang's adapter API and a chat route that refuses an adapter it does not hold."""

    def __init__(self, *, max_loaded: int = 2, load_delay_s: float = 0.0) -> None:
        self.max_loaded = max_loaded
        self.load_delay_s = load_delay_s
        self.loaded: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.served: Counter[str] = Counter()
        self.app = web.Application()
        self.app.router.add_post("/load_lora_adapter", self.load)
        self.app.router.add_post("/unload_lora_adapter", self.unload)
        self.app.router.add_post("/v1/chat/completions", self.chat)

    async def load(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("load", body["lora_name"]))
        await asyncio.sleep(self.load_delay_s)
        if len(self.loaded) >= self.max_loaded:
            return _outcome(False, "max loaded adapters reached")
        self.loaded.add(body["lora_name"])
        return _outcome(True)

    async def unload(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("unload", body["lora_name"]))
        self.loaded.discard(body["lora_name"])
        return _outcome(True)

    async def chat(self, request: web.Request) -> web.Response:
        adapter = (await request.json())["model"].partition(":")[2]
        if adapter not in self.loaded:
            return web.json_response({"error": {"message": f"{adapter} not loaded"}}, status=400)
        self.served[adapter] += 1
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})


def _outcome(success: bool, error: str | None = None) -> web.Response:
    body = {"success": success, "error_message": error, "loaded_adapters": None}
    return web.json_response(body, status=200 if success else 400)


class ReadyReplicas:
    """A Scaler whose replicas are the stand-ins, all ready."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls

    region, model = "test", MODEL

    def desired(self) -> int:
        return len(self.urls)

    def ready_count(self) -> int:
        return len(self.urls)

    def replicas(self) -> list[ReplicaInfo]:
        return [ReplicaInfo(f"r{i}", url, ReplicaState.READY, 0.0, 0.0)
                for i, url in enumerate(self.urls)]  # fmt: skip

    def scale_to(self, replicas: int) -> int:
        return replicas

    def drain(self, replica_id: str) -> bool:
        return False

    async def wait_ready(self, *, at_least: int = 1, timeout_s: float) -> bool:
        return True


LORA = ModelSpec(
    name=MODEL, tenants=["support"], max_loaded_loras=2,
    lora_adapters=[LoraAdapterSpec(name="support-tone", tenant="support"),
                   LoraAdapterSpec(name="support-faq", tenant="support"),
                   LoraAdapterSpec(name="glossary")],
)  # fmt: skip


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


Stands = list[StandInReplica]
Scenario = Callable[[aiohttp.ClientSession, str, list[StandInReplica], AdapterRouter],
                    Awaitable[None]]  # fmt: skip


def run(scenario: Scenario, *, replicas: int = 2, load_delay_s: float = 0.0,
        load_timeout_s: float = 10.0, max_loaded: int = 2) -> None:  # fmt: skip
    """The scenario against an entry serving LORA (support's) and a plain model (search's)."""
    gate = TokenGate(ledger=TokenLedger({"support": None, "search": None}),
                     keys={"key-support": "support", "key-search": "search"})  # fmt: skip

    async def main() -> None:
        stand_ins = [StandInReplica(load_delay_s=load_delay_s, max_loaded=max_loaded)
                     for _ in range(replicas)]  # fmt: skip
        async with AsyncExitStack() as stack:
            urls = [await stack.enter_async_context(served(s.app)) for s in stand_ins]
            session = await stack.enter_async_context(aiohttp.ClientSession())
            scaler = ReadyReplicas(urls)
            adapters = AdapterRouter(model=LORA, scaler=scaler, session=session,
                                     placer=LocalFleetAdapterPlacer(),
                                     load_timeout_s=load_timeout_s, retry_after_s=3)  # fmt: skip
            entry = RegionEntry(
                region="test", scalers={MODEL: scaler, "plain": scaler},
                routers={MODEL: urls[0], "plain": urls[0]}, session=session,
                wake_timeout_s=5, retry_after_s=3, gate=gate,
                owners={MODEL: ["support"], "plain": ["search"]}, adapters={MODEL: adapters},
            )  # fmt: skip
            url = await stack.enter_async_context(served(entry.app))
            await scenario(session, url, stand_ins, adapters)

    asyncio.run(main())


async def chat(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
               **fields: Any) -> tuple[int, dict[str, Any]]:  # fmt: skip
    body = {"messages": [{"role": "user", "content": fields.pop("text", "hello")}], **fields}
    async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as answer:
        return answer.status, json.loads(await answer.text())


def test_a_request_for_an_adapter_no_replica_holds_is_loaded_on_demand_then_routed_to() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        status, body = await chat(session, url, SUPPORT, model=f"{MODEL}:support-tone")
        assert status == 200, body
        loads = [c for s in stand_ins for c in s.calls]
        assert loads == [("load", "support-tone")]  # one replica, once
        for i in range(6):
            status, _ = await chat(session, url, SUPPORT, model=f"{MODEL}:support-tone",
                                   text=f"question {i}")  # fmt: skip
            assert status == 200
        holder = next(s for s in stand_ins if "support-tone" in s.loaded)
        assert holder.served["support-tone"] == 7
        assert adapters.stats.holder_fraction == 1.0 and adapters.stats.on_demand_loads == 1

    run(scenario)


def test_requests_waiting_together_share_one_load() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        answers = await asyncio.gather(*(
            chat(session, url, SUPPORT, model=f"{MODEL}:support-faq", text=f"q{i}")
            for i in range(8)))  # fmt: skip
        assert [status for status, _ in answers] == [200] * 8
        assert sum(c == ("load", "support-faq") for s in stand_ins for c in s.calls) == 1

    run(scenario, load_delay_s=0.3)


@pytest.mark.parametrize(
    ("headers", "fields", "param"),
    [(SEARCH, {"model": f"{MODEL}:support-tone"}, "model"),
     (SUPPORT, {"model": f"{MODEL}:search-rerank"}, "model"),
     (SUPPORT, {"model": MODEL, "lora_path": "search-rerank"}, "lora_path")],
    ids=["another-tenant-names-supports-adapter", "support-names-searchs-adapter",
         "support-names-searchs-adapter-by-lora-path"],
)  # fmt: skip
def test_a_tenant_names_only_its_own_or_shared_adapters(
    headers: dict[str, str], fields: dict[str, str], param: str
) -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        status, body = await chat(session, url, headers, **fields)
        assert status == 404 and body["error"]["code"] == "model_not_found", body
        assert body["error"]["param"] == param
        assert not [c for s in stand_ins for c in s.calls]  # nothing was loaded anywhere
        async with session.get(f"{url}/v1/models", headers=SUPPORT) as answer:
            listed = [m["id"] for m in (await answer.json())["data"]]
        assert listed == [MODEL, f"{MODEL}:glossary", f"{MODEL}:support-faq",
                          f"{MODEL}:support-tone"]  # fmt: skip

    run(scenario)


def test_a_shared_adapter_by_lora_path_is_served() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        status, body = await chat(session, url, SUPPORT, model=MODEL, lora_path="glossary")
        assert status == 200, body

    run(scenario)


def test_a_load_that_outlasts_the_wait_is_a_503_with_retry_after_in_openais_shape() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        body = {"model": f"{MODEL}:support-tone", "messages": [{"role": "user", "content": "x"}]}
        async with session.post(f"{url}/v1/chat/completions", json=body,
                                headers=SUPPORT) as answer:  # fmt: skip
            assert answer.status == 503
            assert answer.headers["Retry-After"] == "3"
            error = (await answer.json())["error"]
        assert error["code"] == "adapter_loading" and "support-tone" in error["message"]

    run(scenario, replicas=1, load_delay_s=2.0, load_timeout_s=0.5)


def test_the_periodic_pass_unloads_a_cold_adapter_but_not_one_in_use() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        for adapter in ("support-tone", "support-faq"):
            assert (await chat(session, url, SUPPORT, model=f"{MODEL}:{adapter}"))[0] == 200
        policy = AdapterPolicy(min_hold_s=0, idle_unload_s=60)
        controller = LocalFleetAdapters({MODEL: adapters}, policy=policy)
        await controller.tick(time.time() + 30)  # asked for 30 s ago: kept
        assert {a for s in stand_ins for a in s.loaded} == {"support-tone", "support-faq"}
        async with adapters.serving("support-tone", {}):  # one request running on it
            await controller.tick(time.time() + 120)
        assert {a for s in stand_ins for a in s.loaded} == {"support-tone"}

    run(scenario)


def test_a_load_the_replica_refuses_is_a_503_that_says_why() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        status, body = await chat(session, url, SUPPORT, model=f"{MODEL}:support-tone")
        assert status == 503 and body["error"]["code"] == "adapter_unavailable", body
        assert "max loaded adapters reached" in body["error"]["message"]
        assert adapters.stats.loads == 0

    run(scenario, replicas=1, max_loaded=0)  # SGLang would refuse: its bound is below ours


def test_among_holders_a_prompt_opening_keeps_its_replica() -> None:
    """Two replicas hold the adapter: the same opening (whose KV one of them holds under the
    adapter) goes to the same one every time, and different openings use both."""

    async def scenario(session: aiohttp.ClientSession, url: str,
                       stand_ins: Stands, adapters: AdapterRouter) -> None:  # fmt: skip
        urls = [r.url for r in adapters.scaler.replicas()]
        await adapters.apply([AdapterAction("load", u, "support-tone") for u in urls])
        for _ in range(5):
            await chat(session, url, SUPPORT, model=f"{MODEL}:support-tone", text="same start")
        assert sorted(s.served["support-tone"] for s in stand_ins) == [0, 5]
        for i in range(20):
            await chat(session, url, SUPPORT, model=f"{MODEL}:support-tone", text=f"other {i}")
        assert all(s.served["support-tone"] > 0 for s in stand_ins)  # both replicas used

    run(scenario)
