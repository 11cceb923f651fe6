"""Pre-warming on the local fleet: a revision's new replica is sent the hottest prompt prefixes
before its router sends it traffic (radixfleet/controllers/autoscale/prewarm.py decides what and
when; radixfleet/localfleet/prewarm.py sends them).

Two regions side by side serve model "m" from one replica each and replay the same
shared-prefix workload through their entries; only "prewarmed" pre-warms. Both are scaled to two
replicas, and each new replica is then sent the workload's prompts directly: the pre-warmed one
has most of every shared prefix cached before its first real request, the cold one nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from radixfleet.controllers.autoscale.prewarm import Prewarming
from radixfleet.controllers.autoscale.spec import Prewarm, Targets
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.prefixes import prompt_blocks
from radixfleet.twin.interfaces import Prewarmer
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import summarise
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload

pytestmark = pytest.mark.fleet

# Four shared prefixes of 1024 tokens, each asked six different questions.
WORKLOAD = SharedPrefixSpec(
    groups=4, requests_per_group=6, prefix_tokens=1024, question_tokens=32, output_tokens=2,
    rate=20.0, seed=3,
)  # fmt: skip
REGIONS = ("prewarmed", "cold")


def spec() -> LocalFleetSpec:
    model = ModelSpec(name="m", replicas=1, max_replicas=2,
                      profile_overrides={"kv_capacity_tokens": 40_000})  # fmt: skip
    return LocalFleetSpec(regions=[RegionSpec(name=r, models=[model]) for r in REGIONS],
                     cold_start_s=1.0)  # fmt: skip


def prewarmers(region: str, _model: ModelSpec) -> Prewarmer | None:
    if region != "prewarmed":
        return None
    return Prewarming(Prewarm(), queue_allowance=Targets().queue_per_replica)


@pytest.fixture(scope="module")
def fleet(cache_dir: Path) -> Iterator[LocalFleet]:
    with LocalFleet(spec(), cache_dir=cache_dir, prewarmers=prewarmers) as local:
        yield local


def _cached_share(url: str, prompts: list[str]) -> float:
    """Cached prompt tokens over prompt tokens, the prompts sent straight to the replica."""
    cached = total = 0
    for prompt in prompts:
        body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1}).encode()
        request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as answer:
            usage = json.loads(answer.read())["usage"]
        cached += usage["prompt_tokens_details"]["cached_tokens"]
        total += usage["prompt_tokens"]
    return cached / total


def test_a_new_replica_has_the_hottest_prefixes_cached_before_it_serves(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    synth = PromptSynth(tokenizer)
    requests = shared_prefix_workload(WORKLOAD)
    prompts = [synth.prompt(r, index=i) for i, r in enumerate(requests)]
    for region in REGIONS:
        items = [
            WorkItem(r.at, region, "m", p, r.output_tokens)
            for r, p in zip(requests, prompts, strict=True)
        ]
        assert summarise(asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))).failed == 0
    # One prompt per prefix: the replica's first sight of each (a second would hit anyway).
    firsts = list({r.hash_ids[0]: p for r, p in zip(requests, prompts, strict=True)}.values())
    assert len(firsts) == WORKLOAD.groups
    shares = {}
    for region in REGIONS:
        scaler = fleet.scaler(region, "m")
        first = {r.id for r in scaler.replicas()}
        assert fleet.scale(region, "m", 2)
        (new,) = [r for r in scaler.replicas() if r.id not in first]
        shares[region] = _cached_share(new.url, firsts)
    warmed = [e for e in fleet.scaler("prewarmed", "m").events if e.kind == "prewarmed"]
    print(f"new replica's cached share: {shares}; warm-up: {warmed}")
    assert shares["cold"] == 0.0
    # 1024 of each prompt's ~1056 tokens are shared, and the warm-up sends each shared prefix
    # whole but for its last partial 256-character slice: 94.7% measured. Picks cut at the
    # ladder's depths (before they were lengthened) gave 74.6%.
    assert shares["prewarmed"] > 0.85
    assert len(warmed) == 1
    answered, _, picked, _ = warmed[0].detail.split()  # "4 of 4 prefixes"
    assert int(answered) == int(picked) >= WORKLOAD.groups


def test_a_replica_woken_from_zero_is_never_held_back_to_warm_up(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    """At zero, requests wait for the first replica and no other serves: it takes them at
    once, however hot the prefixes it could be sent
    (radixfleet/controllers/autoscale/prewarm.may_hold_back: never while nothing else serves, nor
    while a request waits for a replica)."""
    synth = PromptSynth(tokenizer, salt=7)
    requests = shared_prefix_workload(WORKLOAD)
    items = [WorkItem(r.at, "prewarmed", "m", synth.prompt(r, index=i), r.output_tokens)
             for i, r in enumerate(requests)]  # fmt: skip
    assert summarise(asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))).failed == 0
    assert fleet.scale("prewarmed", "m", 0)
    scaler = fleet.scaler("prewarmed", "m")
    seen = len(scaler.events)
    woken = summarise(asyncio.run(Replayer(entries=fleet.entry_urls()).run(items[:1])))
    kinds = [e.kind for e in scaler.events[seen:]]
    assert woken.failed == 0 and "woken" in kinds
    assert "prewarmed" not in kinds, kinds


def _backlog(url: str, *, requests: int, prompt: str) -> threading.Thread:
    """`requests` long generations sent at once straight to one replica, more than its KV
    cache admits together: the rest queue in its scheduler."""

    def send() -> None:
        body = {"model": "m", "prompt": prompt, "max_tokens": 1500, "ignore_eos": True}

        def one(_: int) -> None:
            headers = {"Content-Type": "application/json"}
            data = json.dumps(body).encode()
            request = urllib.request.Request(f"{url}/v1/completions", data=data, headers=headers)
            with urllib.request.urlopen(request, timeout=300) as answer:
                answer.read()

        with ThreadPoolExecutor(requests) as pool:
            list(pool.map(one, range(requests)))

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _queued(url: str) -> int:
    with urllib.request.urlopen(f"{url}/get_load", timeout=10) as answer:
        return sum(int(rank["num_waiting_reqs"]) for rank in json.loads(answer.read()))


def test_a_new_replica_is_not_held_back_while_the_serving_one_has_a_backlog(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    """A queue past the allowance (two per serving replica) is a backlog that new arrivals
    join: the new replica takes traffic at once. Once the queue is gone, the next new replica
    is warmed up (the control: the prefixes are hot throughout)."""
    synth = PromptSynth(tokenizer, salt=11)
    requests = shared_prefix_workload(WORKLOAD)
    items = [WorkItem(r.at, "prewarmed", "m", synth.prompt(r, index=i), r.output_tokens)
             for i, r in enumerate(requests)]  # fmt: skip
    assert fleet.scale("prewarmed", "m", 1)
    assert summarise(asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))).failed == 0
    scaler = fleet.scaler("prewarmed", "m")
    (serving,) = scaler.replicas()
    backlog = _backlog(serving.url, requests=40, prompt=items[0].prompt)
    deadline = time.monotonic() + 60
    while _queued(serving.url) <= 2:
        assert time.monotonic() < deadline, "no backlog formed at the serving replica"
        time.sleep(0.2)
    seen = len(scaler.events)
    assert fleet.scale("prewarmed", "m", 2)
    during = [e.kind for e in scaler.events[seen:]]
    backlog.join(timeout=300)
    assert not backlog.is_alive()
    assert fleet.scale("prewarmed", "m", 1)
    seen = len(scaler.events)
    assert fleet.scale("prewarmed", "m", 2)
    after = [e.kind for e in scaler.events[seen:]]
    assert "ready" in during and "prewarmed" not in during, during
    assert "prewarmed" in after, after


def test_a_replica_taken_down_mid_warm_up_ends_its_warm_up(cache_dir: Path) -> None:
    """A scale-down that takes a warming replica (starting ones go first) ends its warm-up at
    the next look, rather than letting it send every prefix to a replica on its way out. Each
    prefill pass costs 5 s here, so the four hot prefixes would take two passes or more."""
    prewarmer = Prewarming(Prewarm(), queue_allowance=Targets().queue_per_replica)
    for group in range(4):
        blocks = prompt_blocks({"prompt": str(group) * 4096})
        for _ in range(3):
            prewarmer.record(blocks, time.time())
    model = ModelSpec(name="m", replicas=1, max_replicas=2,
                      profile_overrides={"prefill_overhead_s": 5.0})  # fmt: skip
    slow = LocalFleetSpec(regions=[RegionSpec(name="slow", models=[model])], cold_start_s=1.0)
    with LocalFleet(slow, cache_dir=cache_dir, prewarmers=lambda _r, _m: prewarmer) as local:
        scaler = local.scaler("slow", "m")
        (first,) = scaler.replicas()
        assert local.scale("slow", "m", 2, wait=False)
        deadline = time.monotonic() + 60
        while not (new := [r for r in scaler.replicas() if r.id != first.id]) or not _health(
            new[0].url
        ):
            assert time.monotonic() < deadline, "the new replica never became healthy"
            time.sleep(0.1)
        time.sleep(1.0)  # its warm-up is under way: the first pass alone takes 5 s
        assert local.scale("slow", "m", 1, wait=False)
        while not (warmed := [e for e in scaler.events if e.kind == "prewarmed"]):
            assert time.monotonic() < deadline, "the warm-up never ended"
            time.sleep(0.1)
        assert warmed[0].detail == "ended: the replica was taken down", warmed


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.mark.parametrize(
    ("body", "blocks"),
    [
        pytest.param({"prompt": "a" * 600}, ["a" * 256, "a" * 256, "a" * 88], id="text-prompt"),
        pytest.param({"text": "b" * 10}, ["b" * 10], id="generate-text"),
        pytest.param({"prompt": "c" * 10**6}, ["c" * 256] * 512, id="a-huge-prompt-its-opening"),
        pytest.param({"messages": [{"role": "user", "content": "hi"}]}, [], id="chat-not-counted"),
        pytest.param({"input_ids": [1, 2, 3]}, [], id="token-ids-not-counted"),
        pytest.param({"prompt": ["x", "y"]}, [], id="batch-not-counted"),
    ],
)
def test_only_text_prompts_are_counted_and_cut_in_slices(
    body: dict[str, Any], blocks: list[str]
) -> None:
    assert prompt_blocks(body) == blocks
