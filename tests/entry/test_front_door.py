"""A hostile tenant at the front door costs the entry almost nothing: a tenant over its budget
is refused before its body is read, a body past the entry's bound before any byte of it is,
and JSON nested past Python's recursion limit is a 400, not a 500 with a traceback.

The local fleet's entry (`RegionEntry`) with the quota's token gate, on a real aiohttp server,
spoken to over a raw socket so a test can send headers and hold the body back.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import Throttled, TokenLedger
from radixfleet.controllers.quota.shares import ConcurrencyShares
from radixfleet.dataplane.relay import MAX_BODY_BYTES, entry_runner
from radixfleet.localfleet.entry import RegionEntry
from tests.localfleet.test_entry import FakeScaler, serve

BUDGET = TokenBudget(tokens_per_minute=600)


async def router(request: web.Request) -> web.StreamResponse:
    """Answers at once, or, for the prompt `hold`, once `RELEASE` is set."""
    body = await request.json()
    if body.get("prompt") == "hold":
        await request.app[RELEASE].wait()
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    return web.json_response({"choices": [{"text": "x"}], "usage": usage})


RELEASE = web.AppKey("release", asyncio.Event)


@asynccontextmanager
async def front_door(
    gate: TokenGate | None = None, release: asyncio.Event | None = None
) -> AsyncIterator[tuple[int, TokenGate]]:
    """The entry's port, and its gate (by default: tenant `a`, key `key-a`, 600 tokens a
    minute)."""
    gate = gate or TokenGate(ledger=TokenLedger({"a": BUDGET}), keys={"key-a": "a"})
    upstream = web.Application()
    upstream[RELEASE] = release or asyncio.Event()
    upstream.router.add_post("/v1/completions", router)
    async with serve(upstream) as url, aiohttp.ClientSession() as session:
        entry = RegionEntry(region="test", scalers={"m": FakeScaler("m", ready=1)},
                            routers={"m": url}, session=session, wake_timeout_s=5,
                            retry_after_s=7, gate=gate)  # fmt: skip
        runner = entry_runner(entry.app, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            yield runner.addresses[0][1], gate
        finally:
            await runner.cleanup()


async def status_of(
    port: int, *, length: int, sent: bytes, key: str = "key-a", wait_s: float = 20
) -> int:
    """The status the entry answers to headers announcing `length` bytes, of which only
    `sent` are sent: within `wait_s`, or 0 if it waits for the rest (reads the body first)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: entry\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n")  # fmt: skip
    writer.write(head.encode() + sent)
    await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), timeout=wait_s)
    except TimeoutError:
        return 0
    finally:
        writer.close()
    return int(line.split()[1])


def run(scenario: Callable[[int, TokenGate], Awaitable[None]]) -> None:
    async def main() -> None:
        async with front_door() as (port, gate):
            await scenario(port, gate)

    asyncio.run(main())


def test_a_tenant_in_debt_is_refused_before_its_body_is_read() -> None:
    # The gate read and parsed the whole body (up to 64 MiB) before it asked the ledger.
    async def scenario(port: int, gate: TokenGate) -> None:
        assert not isinstance(gate.ledger.admit("a", "m", 10**6, now=gate.clock()), Throttled)
        assert await status_of(port, length=8 * 1024**2, sent=b'{"model": "m", "prompt": "') == 429

    run(scenario)


def test_a_tenant_with_budget_is_read_and_served() -> None:
    async def scenario(port: int, gate: TokenGate) -> None:
        body = json.dumps({"model": "m", "prompt": "hello"}).encode()
        assert await status_of(port, length=len(body), sent=body) == 200
        assert await status_of(port, length=len(body) + 10, sent=body, wait_s=2) == 0  # awaited

    run(scenario)


def test_a_body_past_the_bound_is_refused_by_its_length_before_any_byte() -> None:
    async def scenario(port: int, gate: TokenGate) -> None:
        assert await status_of(port, length=MAX_BODY_BYTES + 1, sent=b"") == 413
        assert await status_of(port, length=60 * 1000**2, sent=b"", key="unknown") == 413

    run(scenario)


@pytest.mark.parametrize("depth", [100_000], ids=["100000-nested-arrays"])
def test_json_nested_past_the_recursion_limit_is_a_400(depth: int) -> None:
    # It was a 500, with a traceback logged for every such request.
    async def scenario(port: int, gate: TokenGate) -> None:
        body = b'{"model": "m", "prompt": ' + b"[" * depth + b"]" * depth + b"}"
        assert await status_of(port, length=len(body), sent=body) == 400

    run(scenario)


@given(
    spent=st.integers(min_value=0, max_value=10_000),
    later=st.floats(min_value=0, max_value=120),
)
def test_owing_refuses_exactly_when_no_request_would_be_admitted(spent: int, later: float) -> None:
    ledger = TokenLedger({"a": BUDGET})
    if spent:
        ticket = ledger.admit("a", "m", 1, now=0.0)
        assert not isinstance(ticket, Throttled)
        ledger.charge(ticket, spent, now=0.0)
    owing = ledger.owing("a", now=later)
    admitted = ledger.admit("a", "m", 1, now=later)
    assert (owing is not None) == isinstance(admitted, Throttled)
    assert TokenLedger({"a": None}).owing("a", now=later) is None


def test_a_tenant_past_its_share_of_connections_cannot_stall_another() -> None:
    # One tenant's 130 streams filled the entry's 100 upstream connections: two other tenants
    # waited 24.4 s for a first token. Scaled down: a pool of 4, two tenants, a share of 2.
    async def main() -> None:
        keys = {"key-a": "a", "key-b": "b"}
        gate = TokenGate(ledger=TokenLedger({"a": None, "b": None}), keys=keys,
                         shares=ConcurrencyShares(pool=4))  # fmt: skip
        release = asyncio.Event()
        async with front_door(gate, release) as (port, _), aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{port}/v1/completions"

            async def ask(key: str, prompt: str) -> tuple[int, str]:
                headers = {"Authorization": f"Bearer {key}"}
                body = {"model": "m", "prompt": prompt}
                async with session.post(url, json=body, headers=headers) as answer:
                    error = (await answer.json()).get("error") or {}
                    return answer.status, str(error.get("code"))

            held = [asyncio.create_task(ask("key-a", "hold")) for _ in range(5)]
            for _ in range(300):  # up to 15 s on a busy machine: a's refusals come back
                if sum(t.done() for t in held) >= 3:
                    break
                await asyncio.sleep(0.05)
            refused = [t.result() for t in held if t.done()]
            assert refused == [(429, "concurrency_limit_exceeded")] * 3
            assert await asyncio.wait_for(ask("key-b", "now"), timeout=10) == (200, "None")
            release.set()
            answered = await asyncio.wait_for(asyncio.gather(*held), timeout=20)
            assert sorted(status for status, _ in answered) == [200, 200, 429, 429, 429]

    asyncio.run(main())


@given(
    steps=st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=60),
    pool=st.integers(min_value=1, max_value=12),
)
def test_no_tenant_ever_holds_more_than_its_share_and_the_pool_is_never_exceeded(
    steps: list[tuple[str, bool]], pool: int
) -> None:
    shares, held = ConcurrencyShares(pool=pool), Counter[str]()
    for tenant, taking in steps:
        if taking:
            if shares.take(tenant, tenants=3):
                held[tenant] += 1
        elif held[tenant]:
            shares.give_back(tenant)
            held[tenant] -= 1
        assert +shares.in_flight == +held
        assert all(n <= shares.share(3) for n in held.values())
        assert sum(held.values()) <= max(pool, 3)
