"""The workload's pure parts: trace readers, transformations, prompt synthesis, streaming
parse and statistics, and the replayer's retry against a stand-in. The traces are the shared ones
(../shared/traces), read a few lines deep."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from aiohttp import web

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.localfleet.workloads import AZURE, MOONCAKE, default_traces_dir
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import RequestResult, WorkItem
from radixfleet.workload.replay import Replayer, _Stream, _StreamError
from radixfleet.workload.stats import breakdown, percentile, summarise
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload
from radixfleet.workload.traces import (
    TraceError,
    TraceRequest,
    compress,
    ideal_hit_rate,
    read_azure,
    read_trace,
    sample_sessions,
    scale_tokens,
)
from tests.localfleet.test_entry import router_standin, serve

TRACES = default_traces_dir()
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/traces is not here")


# -- traces ------------------------------------------------------------------------------------


@needs_traces
def test_azure_reader_gives_seconds_from_the_first_request() -> None:
    requests = read_azure(TRACES / AZURE, limit=3)
    # First lines: 18:15:46.6805900,374,44 and 18:15:50.9951690,396,109.
    assert [(r.input_tokens, r.output_tokens) for r in requests[:2]] == [(374, 44), (396, 109)]
    assert requests[0].at == 0.0
    assert requests[1].at == pytest.approx(4.3145790, abs=1e-6)
    assert all(r.hash_ids == () for r in requests)


@needs_traces
def test_mooncake_reader_keeps_hash_ids_and_milliseconds_become_seconds() -> None:
    requests = read_trace(TRACES / MOONCAKE, limit=2)
    assert requests[0].hash_ids[:3] == (0, 1, 2)
    assert requests[1].hash_ids[0] == 0  # the prefix every request shares
    assert (requests[0].input_tokens, requests[0].block_tokens) == (6758, 512)
    assert requests[0].at == 0.0


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.jsonl", '{"timestamp": 0}\n', "bad.jsonl:1: not a Mooncake request"),
        ("bad.csv", f"{HEADER}\nyesterday,1,2\n", "bad.csv:2"),
        ("neg.csv", f"{HEADER}\n2023-11-16 18:15:46.1,-4,2\n", "neg.csv:2: negative token"),
        ("trace.txt", "", "unknown trace format"),
    ],
    ids=["mooncake-missing-fields", "azure-bad-time", "azure-negative", "unknown-suffix"],
)
def test_a_bad_trace_names_file_and_line(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError, match=expected):
        read_trace(path)


def request(at: float, ids: tuple[int, ...] = (), tokens: int = 1024) -> TraceRequest:
    return TraceRequest(at=at, input_tokens=tokens, output_tokens=10, hash_ids=ids)


def test_compress_keeps_relative_gaps() -> None:
    requests = [request(10.0), request(12.0), request(30.0)]
    assert [r.at for r in compress(requests, duration_s=10.0)] == [0.0, 1.0, 10.0]
    assert [r.at for r in compress(requests, rate=1.0)] == [0.0, 0.2, 2.0]  # 2 gaps at 1/s


def test_scale_tokens_keeps_every_block_and_the_partial_last_one() -> None:
    scaled = scale_tokens([request(0.0, (0, 1, 2), tokens=1100)], factor=0.25)[0]
    assert (scaled.block_tokens, scaled.input_tokens, scaled.output_tokens) == (128, 275, 2)
    tiny = scale_tokens([request(0.0, (0, 1, 2), tokens=1025)], factor=0.01)[0]
    assert tiny.input_tokens >= 2 * tiny.block_tokens + 1  # the last id still has a token


def test_sample_sessions_takes_whole_conversations() -> None:
    requests = [request(float(i), (0, i % 3, 100 + i)) for i in range(9)]
    sample = sample_sessions(requests, count=4, seed=1)
    sessions = {r.hash_ids[1] for r in sample}
    assert len(sample) == 3 * len(sessions)  # every session has 3 requests, all taken
    assert [r.at for r in sample] == sorted(r.at for r in sample)


def test_ideal_hit_rate_counts_only_prefixes() -> None:
    first = TraceRequest(at=0, input_tokens=1024, output_tokens=1, hash_ids=(1, 2))
    same_prefix = TraceRequest(at=1, input_tokens=1024, output_tokens=1, hash_ids=(1, 3))
    gap = TraceRequest(at=2, input_tokens=1024, output_tokens=1, hash_ids=(9, 2))
    assert ideal_hit_rate([first, same_prefix, gap]) == pytest.approx(512 / 3072)
    assert ideal_hit_rate([]) == 0.0


# -- prompts -----------------------------------------------------------------------------------


def test_shared_hash_ids_give_exactly_shared_token_prefixes(tokenizer: EmulatorTokenizer) -> None:
    synth = PromptSynth(tokenizer)
    a = TraceRequest(at=0, input_tokens=700, output_tokens=1, hash_ids=(7, 8, 9), block_tokens=256)
    b = TraceRequest(at=0, input_tokens=600, output_tokens=1, hash_ids=(7, 8, 5), block_tokens=256)
    ids_a = tokenizer.encode(synth.prompt(a, index=0))
    ids_b = tokenizer.encode(synth.prompt(b, index=1))
    assert (len(ids_a), len(ids_b)) == (700, 600)  # one word, one token
    shared = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y)
    assert shared == 512


def test_a_partial_last_block_is_a_prefix_of_the_full_one(tokenizer: EmulatorTokenizer) -> None:
    synth = PromptSynth(tokenizer)
    short = TraceRequest(at=0, input_tokens=300, output_tokens=1, hash_ids=(1, 2), block_tokens=256)
    full = TraceRequest(at=0, input_tokens=512, output_tokens=1, hash_ids=(1, 2), block_tokens=256)
    assert synth.prompt(full, index=0).startswith(synth.prompt(short, index=1))


def test_prompts_without_hash_ids_share_nothing(tokenizer: EmulatorTokenizer) -> None:
    synth = PromptSynth(tokenizer)
    one, two = (synth.prompt(request(0.0, tokens=64), index=i) for i in (0, 1))
    assert one != two
    assert len(tokenizer.encode(one)) == 64


def test_shared_prefix_workload_groups_share_their_prefix_ids() -> None:
    spec = SharedPrefixSpec(groups=3, requests_per_group=4, prefix_tokens=600, block_tokens=256)
    requests = shared_prefix_workload(spec)
    assert len(requests) == 12
    prefixes = {r.hash_ids[:-1] for r in requests}
    assert len(prefixes) == 3 and all(len(p) == 3 for p in prefixes)  # 600 tokens: 3 blocks
    assert len({r.hash_ids[-1] for r in requests}) == 12  # every question its own
    assert all(r.input_tokens == 3 * 256 + spec.question_tokens for r in requests)
    assert [r.at for r in requests] == sorted(r.at for r in requests)


# -- streaming and statistics ------------------------------------------------------------------


def chunk(text: str) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": None}]})


def test_stream_parse_measures_ttft_itl_and_usage() -> None:
    result = RequestResult(region="r", model="m", scheduled=0.0, started=1.0)
    stream = _Stream(result)
    usage = (
        'data: {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 3,'
        ' "prompt_tokens_details": {"cached_tokens": 64}}}'
    )
    for line, now in [(": keep-alive", 1.0), (chunk(" one"), 1.5), (chunk(" two three"), 1.7),
                      (usage, 1.8), ("data: [DONE]", 1.8)]:  # fmt: skip
        stream.feed(line, now=now)
    assert stream.done
    assert result.ttft == pytest.approx(0.5)
    assert result.itl == pytest.approx([0.1, 0.1])  # 0.2 s for a chunk of two tokens
    assert (result.prompt_tokens, result.cached_tokens, result.output_tokens) == (100, 64, 3)


def test_an_error_event_in_a_stream_fails_the_request() -> None:
    stream = _Stream(RequestResult(region="r", model="m", scheduled=0.0))
    with pytest.raises(_StreamError, match="boom"):
        stream.feed('data: {"error": {"message": "boom"}}', now=0.0)


def test_percentile_interpolates_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert (percentile(values, 50), percentile(values, 95)) == (3.0, pytest.approx(4.8))
    assert math.isnan(percentile([], 50))


def finished(region: str, *, ttft: float, cached: int, ok: bool = True) -> RequestResult:
    return RequestResult(
        region=region,
        model="m",
        scheduled=0.0,
        started=0.0,
        first_token=ttft,
        ended=2.0,
        status=200 if ok else 503,
        error=None if ok else "HTTP 503",
        prompt_tokens=100,
        cached_tokens=cached,
        output_tokens=10,
        itl=[0.01] * 9,
    )


def test_summaries_skip_failures_in_latency_and_split_by_region() -> None:
    results = [
        finished("a", ttft=0.1, cached=50),
        finished("a", ttft=0.3, cached=0),
        finished("b", ttft=9.9, cached=100, ok=False),
    ]
    overall = summarise(results)
    assert (overall.requests, overall.failed) == (3, 1)
    assert overall.ttft_s.p50 == pytest.approx(0.2)  # the failed one's 9.9 s is not a latency
    assert overall.prefix_cache_hit_rate == pytest.approx(0.25)
    assert overall.output_tokens_per_s == pytest.approx(10.0)
    parts = breakdown(results)
    assert set(parts["per_region"]) == {"a", "b"}
    assert parts["per_region"]["b"]["prefix_cache_hit_rate"] is None
    assert parts["per_region_model"]["a/m"]["throughput"]["requests_per_s"] == 1.0


def test_a_client_retries_a_server_error_before_any_token_once() -> None:
    calls: list[str] = []

    async def flaky(request: web.Request) -> web.StreamResponse:
        # Every prompt fails on its first send, as a replica injecting errors would.
        prompt = (await request.json())["prompt"]
        calls.append(prompt)
        if calls.count(prompt) == 1:
            return web.json_response({"error": {"message": "injected"}}, status=500)
        return await router_standin(request)

    async def replay(retries: int) -> list[RequestResult]:
        app = web.Application()
        app.router.add_post("/v1/completions", flaky)
        async with serve(app) as url:
            items = [WorkItem(0.0, "r", "m", f"p{retries}-{i}", 2) for i in range(3)]
            return await Replayer(entries={"r": url}, retries=retries).run(items)

    once = asyncio.run(replay(1))
    assert [(r.ok, r.attempts) for r in once] == [(True, 2)] * 3
    never = asyncio.run(replay(0))
    assert [(r.ok, r.status, r.attempts) for r in never] == [(False, 500, 1)] * 3
