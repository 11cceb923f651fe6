"""The region entry counts what each model's prompts began with and gives the hottest to the
data plane (pre-warming in a cluster): the real entry application and token gate, its quota
gate on fakes of the Tenants and their Secrets, and a stand-in router that answers every request
(what a router does with them is tests/entry/test_server.py's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from radixfleet.controllers.quota.entry import ClusterGate
from radixfleet.controllers.quota.fakes import FakeSecrets, FakeTenants
from radixfleet.dataplane.prefixes import HotPrefixes
from radixfleet.dataplane.routes import Target, build_routes
from radixfleet.entry.server import ClusterEntry, Upstreams

REVISION = "chat-predictor-00001"
KEYS = {"blue": "sk-blue", "green": "sk-green"}
DATA_PLANE = {"team-blue": "dp-blue", "team-green": "dp-green"}
SYSTEM = "You are a careful assistant for the blue team. " * 22  # 1,078 characters: 4 blocks
ENOUGH = "kvBlocks=1000&kvFraction=0.5&minHits=2"


class StandInRouter(Upstreams):
    """Every revision's router is one small server that answers 200."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def router(self, target: Target) -> str:
        return self.url

    def knative(self, target: Target) -> str:
        return self.url


async def _answer(_request: web.Request) -> web.StreamResponse:
    return web.json_response({"text": "ok", "meta_info": {}})


def _gate() -> ClusterGate:
    tenants, secrets = FakeTenants(), FakeSecrets()
    for name, key in KEYS.items():
        tenants.add({"metadata": {"name": name}, "spec": {
            "namespaces": [f"team-{name}"], "tokenBudget": {"tokensPerMinute": 6_000_000},
            "apiKeys": [{"name": "keys", "namespace": f"team-{name}"}]}})  # fmt: skip
        secrets.keys[(f"team-{name}", "keys", "api-key")] = key
    return ClusterGate(tenants, secrets, replicas=1, region="test")


def _isvc(namespace: str) -> dict[str, Any]:
    traffic = [{"revisionName": REVISION, "percent": 100}]
    return {"metadata": {"name": "chat", "namespace": namespace},
            "status": {"components": {"predictor": {"traffic": traffic}}}}  # fmt: skip


@asynccontextmanager
async def _entry() -> AsyncIterator[tuple[str, ClusterEntry]]:
    router = web.Application()
    router.add_routes([web.post(path, _answer) for path in ("/generate", "/v1/completions",
                                                            "/v1/chat/completions")])  # fmt: skip
    async with TestServer(router) as stand_in, aiohttp.ClientSession() as session:
        gate = _gate()
        upstreams = StandInRouter(str(stand_in.make_url("")).rstrip("/"))
        entry = ClusterEntry(gate=gate, session=session, upstreams=upstreams)
        entry.keys = {ns: {"api-key": key} for ns, key in DATA_PLANE.items()}
        entry.prefixes = HotPrefixes(keys_of=entry.keys_of)
        entry.routes = build_routes(gate.sync(), [_isvc(ns) for ns in DATA_PLANE])
        async with TestServer(entry.app()) as server:
            yield str(server.make_url("")).rstrip("/"), entry


async def _send(url: str, path: str, body: dict[str, Any], key: str = KEYS["blue"]) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, json=body, headers=headers) as answer,
    ):
        return answer.status


async def _hottest(
    url: str, *, namespace: str = "team-blue", query: str = ENOUGH, key: str | None = "dp-blue"
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/fleet/v1/prefixes/{namespace}/chat?{query}", headers=headers) as answer,
    ):
        return answer.status, await answer.json()


def _prompts(count: int) -> list[str]:
    return [f"{SYSTEM}Question {i}: what is {i} squared? " * 2 for i in range(count)]


def test_the_hottest_prefix_is_the_shared_system_prompt_whole() -> None:
    async def go() -> tuple[int, Any, list[str]]:
        async with _entry() as (url, _):
            prompts = _prompts(6)
            for i, prompt in enumerate(prompts):
                path, body = (("/v1/completions", {"model": "chat", "prompt": prompt})
                              if i % 2 else ("/generate", {"text": prompt}))  # fmt: skip
                assert await _send(url, path, body) == 200
            status, answer = await _hottest(url)
            return status, answer, prompts

    status, answer, prompts = asyncio.run(go())
    assert status == 200
    picks = answer["prefixes"]
    assert picks, answer
    # the whole shared system prompt's blocks, and nothing any prompt did not begin with
    assert len(picks[0]) >= len(SYSTEM) - len(SYSTEM) % 256
    assert all(any(p.startswith(pick) for p in prompts) for pick in picks)


def test_chats_and_one_off_prompts_make_no_pick() -> None:
    async def go() -> tuple[int, Any]:
        async with _entry() as (url, _):
            chat = {"model": "chat", "messages": [{"role": "user", "content": SYSTEM}]}
            for _ in range(3):
                assert await _send(url, "/v1/chat/completions", chat) == 200
            assert await _send(url, "/generate", {"text": SYSTEM + "once"}) == 200
            return await _hottest(url)

    assert asyncio.run(go()) == (200, {"prefixes": []})  # seen once: under minHits 2


def test_each_namespace_counts_its_own_prompts() -> None:
    async def go() -> tuple[Any, Any]:
        async with _entry() as (url, _):
            for prompt in _prompts(3):
                assert await _send(url, "/generate", {"text": prompt}) == 200
            _, green = await _hottest(url, namespace="team-green", key="dp-green")
            _, blue = await _hottest(url)
            return green, blue

    green, blue = asyncio.run(go())
    assert green == {"prefixes": []}
    assert blue["prefixes"]


@pytest.mark.parametrize(
    ("namespace", "key"),
    [
        pytest.param("team-blue", None, id="no-key"),
        pytest.param("team-blue", "sk-blue", id="the-tenants-own-key"),
        pytest.param("team-blue", "dp-green", id="another-namespaces-data-plane-key"),
        pytest.param("team-unknown", "", id="a-namespace-without-a-key"),
    ],
)
def test_only_the_namespaces_data_plane_key_reads_its_prompts(namespace: str, key: str) -> None:
    async def go() -> tuple[int, Any]:
        async with _entry() as (url, _):
            for prompt in _prompts(3):
                assert await _send(url, "/generate", {"text": prompt}) == 200
            return await _hottest(url, namespace=namespace, key=key)

    status, answer = asyncio.run(go())
    assert status == 401
    assert "data-plane key" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        pytest.param("kvFraction=0.5&minHits=2", "kvBlocks", id="kv-blocks-missing"),
        pytest.param("kvBlocks=1.5&kvFraction=0.5&minHits=2", "kvBlocks", id="kv-blocks-not-whole"),
        pytest.param("kvBlocks=0&kvFraction=0.5&minHits=2", "kvBlocks", id="kv-blocks-zero"),
        pytest.param("kvBlocks=10&kvFraction=2&minHits=2", "kvFraction", id="kv-fraction-above-1"),
        pytest.param("kvBlocks=10&kvFraction=0.5&minHits=nan", "minHits", id="min-hits-nan"),
        pytest.param("kvBlocks=10&kvFraction=0.5&minHits=inf", "minHits", id="min-hits-inf"),
    ],
)
def test_a_bad_parameter_gets_400_naming_it(query: str, named: str) -> None:
    async def go() -> tuple[int, Any]:
        async with _entry() as (url, _):
            return await _hottest(url, query=query)

    status, answer = asyncio.run(go())
    assert status == 400
    assert f"'{named}'" in answer["error"]["message"]
