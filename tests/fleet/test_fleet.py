"""The local fleet end to end: emulator processes behind the real SGLang gateway, smg 1.13.0.

One fleet for the module, three regions side by side: "cache-aware" (router policy cache_aware),
"round-robin" (round_robin) and "two-routers" (cache_aware on two router replicas, requests
spread at random), each with two replicas of model "m" whose KV cache holds about half of the
workload's prefixes; "cache-aware" also serves "cold", at zero replicas. Nothing
the fleet started may outlive it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.fleet import FleetSpec, LocalFleet, ModelSpec, RegionSpec
from radixfleet.fleet.procs import processes_with_marker
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import summarise
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload

pytestmark = pytest.mark.fleet

# Eight prefixes of 1024 tokens: ~8.4k tokens of prefixes, more than one replica's 7k.
WORKLOAD = SharedPrefixSpec(
    groups=8, requests_per_group=8, prefix_tokens=1024, question_tokens=32, output_tokens=4,
    rate=10.0, seed=0, block_tokens=256,
)  # fmt: skip
KV_TOKENS = 7000.0
HIT_RATE_MARGIN = 0.08  # measured here: 0.83 (cache_aware) vs 0.67 (round_robin)


def spec() -> FleetSpec:
    warm = ModelSpec(name="m", replicas=2, profile_overrides={"kv_capacity_tokens": KV_TOKENS})
    cold = ModelSpec(name="cold", replicas=0)
    return FleetSpec(
        regions=[
            RegionSpec(name="cache-aware", router_policy="cache_aware", models=[warm, cold]),
            RegionSpec(name="round-robin", router_policy="round_robin", models=[warm]),
            RegionSpec(name="two-routers", routers=2, router_spread="random", models=[warm]),
        ],
        cold_start_s=1.0,
    )


@pytest.fixture(scope="module")
def fleet(cache_dir: Path) -> Iterator[LocalFleet]:
    local = LocalFleet(spec(), cache_dir=cache_dir)
    with local:
        yield local
    assert processes_with_marker(local.fleet_id) == [], "processes outlived the fleet"
    assert not local.workdir.exists()


def replay_hit_rates(
    fleet: LocalFleet, synth: PromptSynth, regions: tuple[str, ...]
) -> dict[str, float]:
    """The workload replayed through each region in turn, none failing: each one's hit rate."""
    requests = shared_prefix_workload(WORKLOAD)
    hit_rates = {}
    for region in regions:
        items = [
            WorkItem(r.at, region, "m", synth.prompt(r, index=i), r.output_tokens)
            for i, r in enumerate(requests)
        ]
        summary = summarise(asyncio.run(Replayer(entries=fleet.entry_urls()).run(items)))
        assert summary.failed == 0
        hit_rates[region] = summary.prefix_cache_hit_rate or 0.0
    return hit_rates


def test_cache_aware_routing_beats_round_robin_on_prefix_hits(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    hit_rates = replay_hit_rates(fleet, PromptSynth(tokenizer), ("cache-aware", "round-robin"))
    assert hit_rates["cache-aware"] > hit_rates["round-robin"] + HIT_RATE_MARGIN, hit_rates


def test_router_replicas_each_route_on_the_same_exact_index(
    fleet: LocalFleet, tokenizer: EmulatorTokenizer
) -> None:
    # Fresh prefixes (another salt), through one router and through two at random: over gRPC
    # each router replica follows every replica's KV events, so spreading loses no hits.
    synth = PromptSynth(tokenizer, salt=1)
    hit_rates = replay_hit_rates(fleet, synth, ("cache-aware", "two-routers"))
    assert hit_rates["two-routers"] > hit_rates["cache-aware"] - HIT_RATE_MARGIN, hit_rates
    members = fleet.router_decisions("two-routers", "m")
    assert len(members) == 2
    assert all(d.get("event_hit", 0) > 0 for d in members), members  # both used, both exact


def test_requests_to_a_model_at_zero_replicas_all_succeed(fleet: LocalFleet) -> None:
    assert fleet.ready_count("cache-aware", "cold") == 0
    items = [
        WorkItem(at=0.05 * i, region="cache-aware", model="cold", prompt=f"Wake {i}", max_tokens=8)
        for i in range(6)
    ]
    results = asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))
    assert [r.error for r in results] == [None] * 6
    assert all(r.output_tokens == 8 for r in results)
    assert fleet.ready_count("cache-aware", "cold") == 1  # one replica woke for all six
    kinds = [e.kind for region, model, e in fleet.events() if model == "cold"]
    assert kinds == ["wake", "woken"]


def test_scrape_targets_label_ready_replicas_by_region_and_model(fleet: LocalFleet) -> None:
    groups = json.loads(fleet.replica_targets_file.read_text())
    placed = sorted((g["labels"]["region"], g["labels"]["model"]) for g in groups)
    assert placed.count(("round-robin", "m")) == 2
    assert placed.count(("cache-aware", "m")) == 2
    urls = {info.url.split("//")[1] for info in fleet.replicas("round-robin", "m")}
    assert urls <= {target for g in groups for target in g["targets"]}


def test_scaling_down_drains_and_stops_the_process(fleet: LocalFleet) -> None:
    assert fleet.scale("round-robin", "m", 1)
    assert len(fleet.replicas("round-robin", "m")) == 1
    events = [(region, e.kind) for region, _, e in fleet.events()]
    assert events.count(("round-robin", "stopped")) == 1
    # The autoscaler's way down: drain the replica it chose (by cache value).
    scaler = fleet.scaler("round-robin", "m")
    chosen = fleet.replicas("round-robin", "m")[0].id

    async def drain() -> bool:
        return scaler.drain(chosen)

    assert fleet.run(drain())
    assert fleet.scale("round-robin", "m", 0)  # already asked for: waits until it is gone
    assert fleet.replicas("round-robin", "m") == []
