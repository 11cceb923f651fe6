"""A thousand concurrent streams on loopback: every one completes, none is lost or cut."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import ReplicaProfile

STREAMS = 1000
TOKENS = 16


async def one_stream(session: aiohttp.ClientSession, url: str, index: int) -> tuple[int, bool]:
    """Stream one chat answer; return its token count and whether it ended with [DONE]."""
    payload = {
        "messages": [{"role": "user", "content": f"Request {index}: summarise the fleet."}],
        "max_tokens": TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(f"{url}/v1/chat/completions", json=payload) as response:
        assert response.status == 200
        lines = [line.decode().strip() async for line in response.content]
    events = [line[6:] for line in lines if line.startswith("data: ")]
    usage = json.loads(events[-2])["usage"]
    return usage["completion_tokens"], events[-1] == "[DONE]"


async def run_all(url: str) -> list[tuple[int, bool]]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return await asyncio.gather(*(one_stream(session, url, i) for i in range(STREAMS)))


@pytest.mark.slow
def test_thousand_concurrent_streams_lose_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Real H100 step times: all thousand fit in one batch and stream for about a second.
    config = EmulatorConfig(profile=ReplicaProfile(), port=0, warm=True)
    tokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")
    with serve_in_thread(config, tokenizer=tokenizer) as replica:
        started = time.monotonic()
        results = asyncio.run(run_all(replica.url))
        elapsed = time.monotonic() - started
        model = replica.emulator.model
        counters = model.stats(replica.emulator.driver.now()).counters
    assert len(results) == STREAMS
    assert all(done and tokens == TOKENS for tokens, done in results)
    assert (counters.num_requests_total, counters.num_aborted_requests_total) == (STREAMS, 0)
    assert elapsed < 60
