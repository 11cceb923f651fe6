"""Chaos on the local fleet's data path: a replica, a router or the entry dies under load.

One region serves model "m" from two emulated replicas behind a real smg gateway (gRPC workers
with KV events, and HTTP workers), with the entry in front. Clients stream completions at a
steady rate and retry as OpenAI's SDK does: a 5xx or a refused connection answered before any
token, twice (`Replayer(retries=2)`). Nothing else helps them.

What may fail: only a stream already under way (answered 200) when its replica or router died,
and only with a clean error event (then `[DONE]`), never a torn connection, and never by sending
its tokens again. (A stream cut before its first token ends the same way: a client, as OpenAI's
SDK, does not retry a 200, and the entry does not hold streams back to retry them itself.)
Every other request succeeds, and the dead part is back (replaced, restarted) before the test
ends. The figures the tests print (requests, failures, time back) go in the note.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.procs import processes_with_marker
from radixfleet.localfleet.scaler import ReplicaState
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import RequestResult, WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.traces import TraceRequest

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

REGION, MODEL = "local", "m"
RATE_RPS, LOAD_S, CHAOS_AT_S = 12.0, 8.0, 3.0
BACK_WITHIN_S = 60.0  # a replica or router not back by then fails the test


@pytest.fixture(scope="module", params=["grpc", "http"])
def fleet(request: pytest.FixtureRequest, cache_dir: Path) -> Iterator[LocalFleet]:
    region = RegionSpec(
        name=REGION, models=[ModelSpec(name=MODEL, replicas=2)], router_workers=request.param
    )
    local = LocalFleet(LocalFleetSpec(regions=[region], cold_start_s=0.5), cache_dir=cache_dir)
    with local:
        yield local
    assert processes_with_marker(local.fleet_id) == [], "processes outlived the fleet"


def steady_load(tokenizer: EmulatorTokenizer, *, seed: int) -> list[WorkItem]:
    """Poisson arrivals for LOAD_S seconds of 100-600-token prompts and 10-60-token answers,
    long enough that some are streaming whenever the chaos strikes."""
    rng, synth = random.Random(seed), PromptSynth(tokenizer, salt=seed)
    items: list[WorkItem] = []
    at = rng.expovariate(RATE_RPS)
    while at < LOAD_S:
        prompt = synth.prompt(TraceRequest(at, rng.randint(100, 600), 0), index=len(items))
        items.append(WorkItem(at, REGION, MODEL, prompt, rng.randint(10, 60)))
        at += rng.expovariate(RATE_RPS)
    return items


def replay_with_chaos(
    fleet: LocalFleet, items: list[WorkItem], chaos: Callable[[], None]
) -> list[RequestResult]:
    """Replay `items`; `chaos()` runs CHAOS_AT_S seconds in, on another thread."""
    timer = threading.Timer(CHAOS_AT_S, chaos)
    timer.start()
    try:
        replayer = Replayer(entries=fleet.entry_urls(), retries=2, lead_s=0.0)
        return asyncio.run(replayer.run(items))
    finally:
        timer.join()


def assert_only_started_streams_failed_cleanly(results: list[RequestResult]) -> None:
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results)} requests, {len(failed)} failed: {[r.error for r in failed][:5]}")
    unclean = [r.error for r in failed if r.status != 200 or "_StreamError" not in str(r.error)]
    assert unclean == [], "only a stream under way may fail, and only with an error event"
    assert len(failed) < len(results) / 4


def wait_until(done: Callable[[], bool], *, timeout_s: float) -> float:
    """Seconds until `done()`; fails the test after `timeout_s`."""
    start = time.monotonic()
    while not done():
        assert time.monotonic() - start < timeout_s, f"not back within {timeout_s:.0f} s"
        time.sleep(0.1)
    return time.monotonic() - start


def replaced(fleet: LocalFleet, killed: str) -> bool:
    """Whether two replicas serve again, `killed` not among them."""
    ready = [r.id for r in fleet.replicas(REGION, MODEL) if r.state is ReplicaState.READY]
    return len(ready) == 2 and killed not in ready


# -- a replica killed mid-stream -------------------------------------------------------------


async def busiest_replica(fleet: LocalFleet) -> str:
    """The replica running the most requests now (the one a lone stream is on)."""
    async with aiohttp.ClientSession() as session:

        async def running(url: str) -> int:
            async with session.get(url + "/v1/loads") as answer:
                return sum(int(load["num_total_reqs"]) for load in (await answer.json())["loads"])

        replicas = [r for r in fleet.replicas(REGION, MODEL) if r.state is ReplicaState.READY]
        counts = await asyncio.gather(*(running(r.url) for r in replicas))
    return max(zip(counts, (r.id for r in replicas), strict=True))[1]


async def stream_and_kill(fleet: LocalFleet, *, kill_after_events: int) -> tuple[list[str], str]:
    """One long stream; its replica is SIGKILLed after `kill_after_events` events. Every event
    the client got, in order, and the replica killed."""
    body = {"model": MODEL, "prompt": "tell a long story " * 20, "max_tokens": 2000,
            "ignore_eos": True, "stream": True}  # fmt: skip
    events: list[str] = []
    killed = ""
    async with aiohttp.ClientSession() as session:
        url = fleet.entry_url(REGION) + "/v1/completions"
        async with session.post(url, json=body) as answer:
            assert answer.status == 200
            async for line in answer.content:
                if not line.strip():
                    continue
                events.append(line.decode().strip())
                if len(events) == kill_after_events:
                    killed = await busiest_replica(fleet)
                    fleet.kill_replica(REGION, MODEL, killed)
    return events, killed


def test_a_stream_whose_replica_is_killed_ends_with_one_error_event_and_no_repeated_token(
    fleet: LocalFleet,
) -> None:
    events, killed = asyncio.run(stream_and_kill(fleet, kill_after_events=5))
    assert events[-1] == "data: [DONE]"
    errors = [i for i, e in enumerate(events) if '"error"' in e]
    assert len(errors) == 1 and errors[0] == len(events) - 2, events[-3:]
    texts = [json.loads(e[5:])["choices"][0]["text"] for e in events[: errors[0]]]
    # Cut, not restarted: the tokens before the error are the only ones, sent once each.
    assert 5 <= len(texts) < 2000
    back = wait_until(lambda: replaced(fleet, killed), timeout_s=BACK_WITHIN_S)
    print(f"\nkilled after {len(texts)} tokens; two replicas ready again {back:.1f} s later")


def test_killing_a_replica_under_load_fails_only_the_streams_it_had_begun(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    killed: list[str] = []

    def kill() -> None:
        killed.append(asyncio.run(busiest_replica(fleet)))
        fleet.kill_replica(REGION, MODEL, killed[0])

    results = replay_with_chaos(fleet, steady_load(tokenizer, seed=1), kill)
    assert_only_started_streams_failed_cleanly(results)
    wait_until(lambda: replaced(fleet, killed[0]), timeout_s=BACK_WITHIN_S)


# -- the router and the entry restarted ------------------------------------------------------


def test_a_router_killed_under_load_is_restarted_and_loses_no_request_not_yet_streaming(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.time())
        fleet.kill_router(REGION, MODEL)

    results = replay_with_chaos(fleet, steady_load(tokenizer, seed=2), kill)
    assert_only_started_streams_failed_cleanly(results)
    restarted = [e for _, _, e in fleet.events() if e.kind == "router-restarted"]
    assert restarted, "the router was not started again"
    print(f"router serving again {restarted[-1].at - killed_at[0]:.1f} s after the kill")


def test_an_entry_restarted_under_load_drains_and_loses_no_request(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    before = fleet.entry(REGION)
    results = replay_with_chaos(
        fleet, steady_load(tokenizer, seed=3), lambda: fleet.restart_entry(REGION)
    )
    failed = [r.error for r in results if not r.ok]
    retried = [r for r in results if r.attempts > 1]
    print(f"\n{len(results)} requests, {len(retried)} retried after a failed connection")
    assert failed == []
    assert fleet.entry(REGION) is not before, "the entry was not restarted"
    assert sum(before.in_flight.values()) == 0
