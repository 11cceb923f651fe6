"""The twin's model of smg agrees with the real smg on the same requests.

One shared-prefix workload (24 tenants' 4,096-token prompts, 6 questions each, in random order,
8 req/s) goes through two fleets of four H100 replicas whose KV cache (32,000 tokens each) holds
a third of the working set: the local fleet, where the real smg 1.13.0 routes cache-aware on the
emulated replicas' KV events, and the twin, where `SmgCacheAware(index="event")` routes in
virtual time over the same replica model. The twin replays the very same requests (written as a
Mooncake-format trace: same arrival times, same 512-token block ids), so the two prefix hit
rates (each side's median over its runs) must agree within 5% (the issue's bar). The bar can
be missed: with its ties broken in a fixed order (every miss to one replica) the twin's model
gave 0.745 against smg's 0.814, and a twin that ignored the replicas' caches (round robin)
gives 0.20, which the last assertion checks.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest

from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.twin.replay import fixed_fleet_hit_rates
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import summarise
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload
from radixfleet.workload.traces import TraceRequest

pytestmark = [pytest.mark.fleet, pytest.mark.slow]
KV_TOKENS = 32_000
REPLICAS = 4
REAL_RUNS = 5
WORKLOAD = SharedPrefixSpec(
    groups=24,
    requests_per_group=6,
    prefix_tokens=4096,
    question_tokens=64,
    output_tokens=8,
    rate=8.0,
    seed=1,
    block_tokens=512,  # Mooncake's, so the twin reads the same block ids
)


def fleet_hit_rate(requests: list[TraceRequest], cache_dir: Path) -> float:
    synth = PromptSynth(load_tokenizer(cache_dir))
    model = ModelSpec(
        name="m", replicas=REPLICAS, max_replicas=REPLICAS,
        profile_overrides={"kv_capacity_tokens": float(KV_TOKENS)},
    )  # fmt: skip
    spec = LocalFleetSpec(regions=[RegionSpec(name="r", models=[model], router_workers="grpc")])
    items = [
        WorkItem(r.at, "r", "m", synth.prompt(r, index=i), r.output_tokens)
        for i, r in enumerate(requests)
    ]
    with LocalFleet(spec, cache_dir=cache_dir) as fleet:
        results = asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    rate = summarise(results).prefix_cache_hit_rate
    assert rate is not None
    return rate


def twin_hit_rates(requests: list[TraceRequest], tmp: Path, *, seed: int) -> dict[str, float]:
    routing = {"smg": "smg_cache_aware", "round-robin": "round_robin"}
    return fixed_fleet_hit_rates(
        requests, routing=routing, replicas=REPLICAS, kv_tokens=KV_TOKENS, workdir=tmp, seed=seed
    )


def test_the_twins_smg_matches_the_real_one_within_five_percent(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    requests = shared_prefix_workload(WORKLOAD)
    # The real smg breaks its ties at random too, and on a busy machine a run now and then
    # lands some 0.05 below the others: the real side is the median of five fresh fleets (of
    # three, one CI run's median fell 0.003 outside the bar: 0.739, 0.759, 0.773 against 0.800).
    cache_dir = tmp_path_factory.getbasetemp() / "tokenizer-cache"
    reals = [fleet_hit_rate(requests, cache_dir) for _ in range(REAL_RUNS)]
    real = statistics.median(reals)
    # Which idle replica takes a miss is a coin toss in both; the twin's median over five
    # seeds is what it predicts (its seeds spread 0.78-0.81 here, the oracle is 0.81).
    runs = [twin_hit_rates(requests, tmp_path, seed=seed) for seed in range(5)]
    twin = statistics.median(run["smg"] for run in runs)
    assert abs(twin - real) <= 0.05 * real, (runs, reals)
    assert abs(runs[0]["round-robin"] - real) > 0.05 * real, (runs, real)
