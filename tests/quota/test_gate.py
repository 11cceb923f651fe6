"""The token gate on a real aiohttp server: 401, 429 with Retry-After, streams metered as they
pass and settled with the replica's usage, failures refunded, and the Prometheus series.

Prompts are counted by a stand-in tokenizer of one token per four characters (`quarter`), so
the numbers read plainly: the gate's arithmetic is under test here. The model's real tokenizer,
at a real smg router, counts in tests/localfleet/test_entry.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from pydantic import ValidationError

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.entry import ClusterGate
from radixfleet.controllers.quota.fakes import FakeSecrets, FakeTenants
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.controllers.quota.metrics import TokenMetrics
from radixfleet.controllers.quota.observe import api_keys
from radixfleet.controllers.quota.spec import TenantSpec
from radixfleet.dataplane.gate import CountPrompt

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
    if body.get("batch"):  # SGLang's /generate with a list of texts: one answer per text
        meta = {"prompt_tokens": 10, "completion_tokens": tokens}
        return web.json_response([{"text": "x" * tokens, "meta_info": meta}] * body["batch"])
    if body.get("no_usage"):
        return web.json_response({"choices": [{"text": "x" * tokens}]})
    if not body.get("stream"):
        usage = {"prompt_tokens": 10, "completion_tokens": tokens}
        return web.json_response({"choices": [{"text": "x" * tokens}], "usage": usage})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for sent in range(tokens):
        if sent == body.get("cut_after"):  # the stream breaks (the client hung up) mid-way
            raise ConnectionResetError("client gone")
        chunk = {"choices": [{"delta": {"content": "t"}}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"prompt_tokens": 10, "completion_tokens": tokens}
    await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await response.write_eof()
    return response


async def quarter(_tenant: str, _model: str, texts: Sequence[str]) -> int | None:
    """A stand-in tokenizer: a token per four characters, rounded up."""
    return sum(math.ceil(len(text) / 4) for text in texts)


def run(
    test: Callable[[TestClient, TokenGate], Awaitable[None]], *, per_minute: int = 600
) -> TokenGate:
    budget = TokenBudget(tokens_per_minute=per_minute)
    gate = TokenGate(
        ledger=TokenLedger({"a": budget, "b": budget}, burst_seconds=10.0),
        keys=KEYS,
        metrics=TokenMetrics(region="local"),
        clock=Clock(),
        count=quarter,
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
        assert (await response.json())["error"]["code"] == "invalid_api_key"

    run(test)


def test_past_the_budget_answers_429_with_retry_after() -> None:
    async def test(client: TestClient, gate: TokenGate) -> None:
        # 600 tokens/min: a 100-token burst. Two 10-token prompts, each reserving its 30
        # completion tokens on admission, leave 20: a chat that reserves more waits.
        for _ in range(2):
            first = await client.post(
                "/v1/chat/completions", json=chat(stream=True, max_tokens=30), headers=AUTH_A
            )
            assert first.status == 200
            await first.read()
        throttled = await client.post("/v1/chat/completions", json=chat(), headers=AUTH_A)
        assert throttled.status == 429
        assert int(throttled.headers["Retry-After"]) >= 1
        assert (await throttled.json())["error"]["code"] == "rate_limit_exceeded"
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
    # Prompt counted at 10 tokens (40 characters), the replica said 10: no correction.
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


def test_a_stream_cut_after_tokens_flowed_stays_charged_for_its_prompt() -> None:
    # Reading the first events and hanging up must not refund the prompt the replica read (it
    # did, and a tenant ran at four times its budget so).
    async def test(client: TestClient, gate: TokenGate) -> None:
        body = chat(stream=True, max_tokens=50, cut_after=2)
        with contextlib.suppress(Exception):
            answer = await client.post("/v1/chat/completions", json=body, headers=AUTH_A)
            await answer.read()

    gate = run(test, per_minute=60_000)
    assert gate.ledger.balance("a", now=0.0) == 10_000 - (10 + 2)


def test_a_batch_answered_as_a_list_is_charged_every_items_completion() -> None:
    gate, app = _gate(TokenBudget(tokens_per_minute=60_000))

    async def send() -> None:
        async with TestClient(TestServer(app)) as client:
            body = {"text": ["x" * 40, "y" * 40], "batch": 2, "max_tokens": 250}
            answer = await client.post("/generate", json=body, headers=AUTH_A)
            assert answer.status == 200

    asyncio.run(send())
    # Each of the two answers read 10 prompt tokens and generated 250.
    assert gate.ledger.balance("a", now=0.0) == 10_000 - 2 * (10 + 250)


def _gate(
    budget: TokenBudget, *, model_of: Any = None, count: CountPrompt | None = quarter
) -> tuple[TokenGate, web.Application]:
    gate = TokenGate(ledger=TokenLedger({"a": budget}, burst_seconds=10.0), keys=KEYS,
                     clock=Clock(), count=count, metrics=TokenMetrics(region="local"))  # fmt: skip
    app = web.Application()
    for path in ("/v1/chat/completions", "/v1/completions", "/generate"):
        app.router.add_post(path, replica)
    gate.install(app, model_of=model_of)
    return gate, app


async def _send(app: web.Application, path: str, body: dict[str, Any]) -> None:
    # `no_usage`: the stand-in reports no usage, so the admission count is what stays charged.
    async with TestClient(TestServer(app)) as client:
        answer = await client.post(path, json={**body, "no_usage": True}, headers=AUTH_A)
        assert answer.status == 200


@pytest.mark.parametrize(
    ("path", "body", "tokens"),
    [
        pytest.param("/v1/completions", {"model": "m", "prompt": [7] * 150}, 150, id="openai-ids"),
        pytest.param("/v1/completions", {"model": "m", "prompt": [[7] * 80] * 2}, 160, id="batch"),
        pytest.param("/generate", {"input_ids": [7] * 150}, 150, id="sglang-input-ids"),
        pytest.param("/v1/completions", {"model": "m", "prompt": "x" * 40}, 10, id="text"),
        pytest.param(
            "/v1/completions",
            {"model": "m", "messages": [], "prompt": "x" * 40},
            10,
            id="empty-messages-beside-a-prompt",
        ),
    ],
)
def test_a_prompt_given_as_token_ids_is_charged_one_token_per_id(
    path: str, body: dict[str, Any], tokens: int
) -> None:
    gate, app = _gate(TokenBudget(tokens_per_minute=60_000))  # a 10,000-token burst
    asyncio.run(_send(app, path, body))
    assert gate.ledger.balance("a", now=0.0) == 10_000 - tokens


async def cannot_count(_tenant: str, _model: str, _texts: Sequence[str]) -> int | None:
    return None  # a router without a tokenizer, or one restarting


@pytest.mark.parametrize(
    "count", [cannot_count, None], ids=["the-router-cannot-count", "no-tokenizer-at-all"]
)
def test_a_prompt_no_tokenizer_counted_is_charged_its_bytes_never_an_estimate_to_game(
    count: CountPrompt | None,
) -> None:
    # Characters/4 charged 40 Japanese characters as 10 tokens; a byte-level BPE makes up to
    # three of each (the evasion ran a tenant at twelve times its budget). Their UTF-8 bytes,
    # plus one for a leading token, are a count no tokenizer exceeds.
    gate, app = _gate(TokenBudget(tokens_per_minute=60_000), count=count)
    asyncio.run(_send(app, "/v1/completions", {"model": "m", "prompt": "日本語" * 40}))
    assert gate.ledger.balance("a", now=0.0) == 10_000 - (3 * 3 * 40 + 1)
    assert sample(gate, "radixfleet_prompt_counts_total", model_name="m", by="bytes") == 1


def test_a_prompt_the_models_tokenizer_counted_is_charged_that_count() -> None:
    gate, app = _gate(TokenBudget(tokens_per_minute=60_000))
    asyncio.run(_send(app, "/v1/completions", {"model": "m", "prompt": "日本語" * 40}))
    assert gate.ledger.balance("a", now=0.0) == 10_000 - 30
    assert sample(gate, "radixfleet_prompt_counts_total", model_name="m", by="tokenizer") == 1


@pytest.mark.parametrize("resolved", [True, False], ids=["entry-resolves", "body-only"])
def test_leaving_the_model_out_is_charged_to_the_model_the_entry_serves(resolved: bool) -> None:
    budget = TokenBudget(tokens_per_minute=60_000, per_model={"m": 60_000})
    model_of = (lambda _tenant, body: body.get("model") or "m") if resolved else None
    gate, app = _gate(budget, model_of=model_of)
    asyncio.run(_send(app, "/v1/completions", {"prompt": "x" * 40}))  # no "model"
    charged = 10_000 - (gate.ledger.balance("a", "m", now=0.0) or 0)
    assert charged == (10 if resolved else 0)


def test_completions_are_reserved_on_admission_so_small_prompts_cannot_overspend() -> None:
    # Ten 10-token prompts asking for 50 tokens each, at once: each was admitted on its prompt
    # alone and the tenant generated several times its 100-token burst.
    async def test(client: TestClient, gate: TokenGate) -> None:
        async def ask() -> tuple[int, int]:
            answer = await client.post("/v1/chat/completions", json=chat(max_tokens=50),
                                       headers=AUTH_A)  # fmt: skip
            body = await answer.json()
            usage = body.get("usage") or {}
            return answer.status, usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)

        answers = await asyncio.gather(*(ask() for _ in range(10)))
        served = sum(tokens for status, tokens in answers if status == 200)
        assert 0 < served <= 100, answers

    run(test)


# -- keys that rotate --------------------------------------------------------------------------

NOON = datetime(2026, 11, 28, 12, tzinfo=UTC)
NEW_YEAR_IN_PARIS = datetime(2026, 12, 31, 23, tzinfo=UTC)


def test_keys_rotate_with_traffic_flowing_and_an_expired_key_is_refused_saying_so() -> None:
    """Rotation as a platform team does it: the new key beside the old one, the clients moved,
    the old one expiring. Both keys are served while both live; a stream admitted before its
    key expired is answered whole; after the expiry the old key gets 401, which says why."""

    async def test(client: TestClient, gate: TokenGate) -> None:
        wall = [NOON]
        gate.wall_clock = lambda: wall[0]
        expiry = NOON + timedelta(minutes=5)
        gate.reload(budgets=gate.ledger.budgets, keys={**KEYS, "key-a2": "a"},
                    expiries={"key-a": expiry})  # fmt: skip
        new = {"Authorization": "Bearer key-a2"}
        for headers in (AUTH_A, new, AUTH_A, new):
            answer = await client.post("/v1/chat/completions", json=chat(), headers=headers)
            assert answer.status == 200, await answer.text()
        under_way = await client.post(
            "/v1/chat/completions", json=chat(stream=True, max_tokens=5), headers=AUTH_A
        )
        wall[0] = expiry  # the old key expires while its stream is being answered
        assert under_way.status == 200 and (await under_way.read()).count(b'"content"') == 5
        refused = await client.post("/v1/chat/completions", json=chat(), headers=AUTH_A)
        assert refused.status == 401
        error = (await refused.json())["error"]
        assert (
            error["code"] == "invalid_api_key" and "expired at 2026-11-28T12:05" in error["message"]
        )
        served = await client.post("/v1/chat/completions", json=chat(), headers=new)
        assert served.status == 200

    run(test, per_minute=60_000)


def test_a_tenants_keys_and_their_expiries_are_read_from_its_secrets() -> None:
    tenants, secrets = FakeTenants(), FakeSecrets()
    ref = {"name": "keys", "namespace": "team-a"}
    refs = [ref | {"key": "old", "expiresAt": "2026-12-01T00:00:00Z"}, ref | {"key": "new"},
            ref | {"key": "gone"}]  # fmt: skip
    tenants.add({"metadata": {"name": "a"}, "spec": {"namespaces": ["team-a"], "apiKeys": refs}})
    secrets.keys |= {("team-a", "keys", "old"): "sk-old", ("team-a", "keys", "new"): "sk-new"}
    cluster = ClusterGate(tenants, secrets, replicas=1, region="test")
    cluster.sync()
    assert cluster.gate.keys == {"sk-old": "a", "sk-new": "a"}
    assert cluster.gate.expiries == {"sk-old": datetime(2026, 12, 1, tzinfo=UTC)}


@pytest.mark.parametrize(
    ("expiries", "latest"),
    [(["2026-12-01T00:00:00Z", "2027-01-01T00:00:00+01:00"], NEW_YEAR_IN_PARIS),
     (["2026-12-01T00:00:00Z", None], None)],
    ids=["the-later-expiry", "never-if-one-never-does"],
)  # fmt: skip
def test_a_key_named_twice_by_its_tenant_expires_at_the_later(
    expiries: list[str | None], latest: datetime | None
) -> None:
    refs = [{"name": f"keys-{i}", "namespace": "team-a"} | ({"expiresAt": e} if e else {})
            for i, e in enumerate(expiries)]  # fmt: skip
    tenant = {"metadata": {"name": "a"}, "spec": {"namespaces": ["team-a"], "apiKeys": refs}}
    secrets = FakeSecrets({("team-a", f"keys-{i}", "api-key"): "sk-a" for i in range(2)})
    found = api_keys([tenant], secrets)
    assert found.tenants == {"sk-a": "a"}
    assert found.expiries.get("sk-a") == latest


def test_an_expiry_without_a_time_zone_is_refused() -> None:
    ref = {"name": "keys", "namespace": "team-a", "expiresAt": "2027-01-01T00:00:00"}
    with pytest.raises(ValidationError, match="time zone"):
        TenantSpec.model_validate({"namespaces": ["team-a"], "apiKeys": [ref]})
