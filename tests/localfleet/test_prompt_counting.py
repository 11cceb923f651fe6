"""Prompts are charged on admission as the model's own tokenizer counts them, at its router.

One region of the local fleet: the real smg router (holding the emulator's tokenizer) in front
of an emulated replica, and the quota's token gate. A stream the client hangs up on after its
first token reports no usage, so what the gate counted on admission is what the tenant pays for
the prompt: it must be what the replica itself counts for that prompt. Characters/4 charged 40
Japanese characters as 10 tokens where the tokenizer makes about a hundred.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import requests

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.controllers.quota.metrics import TokenMetrics
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec

pytestmark = pytest.mark.fleet

REGION, MODEL, TENANT, KEY = "local", "chat", "team-a", "sk-counting"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPTS = {
    "english": "The quick brown fox jumps over the lazy dog near the river bank today. " * 4,
    "japanese": "東京の天気は晴れのち曇りでしょう。" * 4,
    "mixed": "Résumé: naïve café — 北京 2026年 ✓ " * 4,
}


@pytest.fixture(scope="module")
def entry(cache_dir: Path) -> Iterator[tuple[str, TokenGate]]:
    gate = TokenGate(ledger=TokenLedger({TENANT: TokenBudget(tokens_per_minute=10_000_000)}),
                     keys={KEY: TENANT}, metrics=TokenMetrics(region=REGION))  # fmt: skip
    spec = LocalFleetSpec(regions=[RegionSpec(name=REGION, models=[ModelSpec(name=MODEL)])],
                          cold_start_s=0.5)  # fmt: skip
    with LocalFleet(spec, cache_dir=cache_dir, gates={REGION: gate}) as local:
        yield local.entry_url(REGION), gate


def prompt_charged(gate: TokenGate) -> float:
    """What the gate has charged for prompts so far (on admission, and settling corrections)."""
    assert gate.metrics is not None
    found = gate.metrics.registry.get_sample_value(
        "radixfleet_tenant_tokens_total",
        {"region": REGION, "tenant": TENANT, "model_name": MODEL, "kind": "prompt"},
    )
    return found or 0.0


async def _hang_up_after_the_first_token(url: str, text: str) -> None:
    body = {"model": MODEL, "prompt": text, "max_tokens": 200, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/completions", json=body, headers=AUTH) as answer,
    ):
        assert answer.status == 200
        async for line in answer.content:
            if line.startswith(b'data: {"') and b'"text":""' not in line:
                return  # the first token: hang up


@pytest.mark.parametrize("language", PROMPTS.keys())
def test_a_stream_hung_up_on_pays_for_its_prompt_as_the_replica_counts_it(
    entry: tuple[str, TokenGate], language: str
) -> None:
    url, gate = entry
    text = PROMPTS[language]
    whole = requests.post(f"{url}/v1/completions", headers=AUTH, timeout=30,
                          json={"model": MODEL, "prompt": text, "max_tokens": 1})  # fmt: skip
    assert whole.status_code == 200, whole.text
    replica_counts = whole.json()["usage"]["prompt_tokens"]

    before = prompt_charged(gate)
    asyncio.run(_hang_up_after_the_first_token(url, text))
    deadline = time.monotonic() + 30
    while gate.shares.in_flight[TENANT] and time.monotonic() < deadline:
        time.sleep(0.05)  # the entry settles the ticket once it sees the client gone
    assert not gate.shares.in_flight[TENANT], "the hung-up stream never settled"
    assert prompt_charged(gate) - before == replica_counts
    assert gate.metrics is not None
    by_tokenizer = gate.metrics.registry.get_sample_value(
        "radixfleet_prompt_counts_total", {"region": REGION, "model_name": MODEL, "by": "tokenizer"}
    )
    assert by_tokenizer is not None and by_tokenizer >= 2
