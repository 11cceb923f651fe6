"""The token gate on a real aiohttp server: 401, 429 with Retry-After, streams metered as they
pass and settled with the replica's usage, failures refunded, and the Prometheus series."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest

from policies.quota.gate import TokenGate
from policies.quota.ledger import TokenLedger
from policies.quota.metrics import TokenMetrics
from radixfleet.config.catalog import TokenBudget

KEYS = {"key-a": "a", "key-b": "b"}
AUTH_A = {"Authorization": "Bearer key-a"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def replica(request: web.Request) -> web.StreamResponse:
    """Stands in for the entry's proxy: answers like SGLang, streaming when asked."""
    body = await request.json()
    if body.get("fail"):
        raise web.HTTPServiceUnavailable()
    tokens = int(body.get("max_tokens", 3))
    if not body.get("stream"):
        usage = {"prompt_tokens": 10, "completion_tokens": tokens}
        return web.json_response({"choices": [{"text": "x" * tokens}], "usage": usage})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(tokens):
        chunk = {"choices": [{"delta": {"content": "t"}}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"prompt_tokens": 10, "completion_tokens": tokens}
    await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await response.write_eof()
    return response


def run(
    test: Callable[[TestClient, TokenGate], Awaitable[None]], *, per_minute: int = 600
) -> TokenGate:
    budget = TokenBudget(tokens_per_minute=per_minute)
    gate = TokenGate(
        ledger=TokenLedger({"a": budget, "b": budget}, burst_seconds=10.0),
        keys=KEYS,
        metrics=TokenMetrics(region="local"),
        clock=Clock(),
    )
    app = web.Application()
    app.router.add_post("/v1/chat/completions", replica)
    gate.install(app)

    async def main() -> None:
        async with TestClient(TestServer(app)) as client:
            await test(client, gate)

    asyncio.run(main())
    return gate


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "x" * 40}], **extra}


def sample(gate: TokenGate, name: str, **labels: str) -> float:
    assert gate.metrics is not None
    for family in gate.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def test_unknown_key_is_401_and_reaches_no_replica() -> None:
    async def test(client: TestClient, _: TokenGate) -> None:
        response = await client.post("/v1/chat/completions", json=chat())
        assert response.status == 401
        assert (await response.json())["error"]["type"] == "UnauthorizedError"

    run(test)


def test_past_the_budget_answers_429_with_retry_after() -> None:
    async def test(client: TestClient, gate: TokenGate) -> None:
        # 600 tokens/min: a 100-token burst. Two 40-token streams of 50 completion tokens spend it.
        for _ in range(2):
            first = await client.post(
                "/v1/chat/completions", json=chat(stream=True, max_tokens=50), headers=AUTH_A
            )
            await first.read()
        throttled = await client.post("/v1/chat/completions", json=chat(), headers=AUTH_A)
        assert throttled.status == 429
        assert int(throttled.headers["Retry-After"]) >= 1
        assert (await throttled.json())["error"]["retryable"] is True
        other = await client.post(
            "/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer key-b"}
        )
        assert other.status == 200

    gate = run(test)
    assert sample(gate, "radixfleet_tenant_throttled_requests_total", tenant="a") == 1
    assert sample(gate, "radixfleet_tenant_throttled_requests_total", tenant="b") == 0


def test_streams_are_metered_and_settled_with_the_usage() -> None:
    async def test(client: TestClient, gate: TokenGate) -> None:
        response = await client.post(
            "/v1/chat/completions", json=chat(stream=True, max_tokens=7), headers=AUTH_A
        )
        await response.read()

    gate = run(test, per_minute=60_000)
    # Prompt estimated at 10 tokens (40 characters), the replica said 10: no correction.
    assert sample(gate, "radixfleet_tenant_tokens_total", tenant="a", kind="prompt") == 10
    assert sample(gate, "radixfleet_tenant_tokens_total", tenant="a", kind="completion") == 7
    assert gate.ledger.balance("a", now=0.0) == 10_000 - 17
    exposition = generate_latest(gate.metrics.registry).decode()  # type: ignore[union-attr]
    assert (
        'radixfleet_tenant_tokens_total{kind="completion",model_name="m",region="local",'
        'tenant="a"} 7.0' in exposition
    )
    assert 'radixfleet_tenant_token_budget_per_minute{tenant="a"} 60000.0' in exposition


def test_whole_answers_settle_from_their_body_and_failures_refund_the_prompt() -> None:
    async def test(client: TestClient, gate: TokenGate) -> None:
        ok = await client.post("/v1/chat/completions", json=chat(max_tokens=5), headers=AUTH_A)
        assert ok.status == 200
        failed = await client.post("/v1/chat/completions", json=chat(fail=True), headers=AUTH_A)
        assert failed.status == 503

    gate = run(test, per_minute=60_000)
    assert gate.ledger.balance("a", now=0.0) == 10_000 - 15  # the failed request cost nothing
