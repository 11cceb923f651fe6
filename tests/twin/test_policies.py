"""The baselines' rules, one by one: smg's cache_aware (tree, events), Knative's KPA, Route 53."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.replica import RequestSpec
from radixfleet.revisions import pick_revision
from radixfleet.twin.autoscale import Kpa, KpaSettings
from radixfleet.twin.interfaces import (
    FleetObservation,
    RegionObservation,
    ReplicaView,
    ServiceObservation,
)
from radixfleet.twin.load import parse_scenario
from radixfleet.twin.routing import (
    ApproxTree,
    LeastLoad,
    RoundRobin,
    SmgCacheAware,
    spill_margin,
)
from radixfleet.twin.scenario import RouterSettings
from radixfleet.twin.traffic import Route53
from tests.twin.conftest import SMALL


@dataclass
class Worker:
    id: int
    load: int = 0
    cached: tuple[int, ...] = ()  # the one prompt its cache holds, as its KV events said

    def cached_prefix(self, blocks: Sequence[Hashable]) -> int:
        count = 0
        for mine, theirs in zip(self.cached, blocks, strict=False):
            if mine != theirs:
                break
            count += 1
        return count

    def tiered_prefix(self, blocks: Sequence[Hashable]) -> tuple[int, int]:
        return self.cached_prefix(blocks), 0


def spec(blocks: tuple[int, ...], tokens_per_block: int = 16) -> RequestSpec:
    tokens = len(blocks) * tokens_per_block + 1
    return RequestSpec(
        rid="r", prompt_tokens=tokens, output_tokens=1, max_new_tokens=1, prompt_blocks=blocks
    )


# -- routing -------------------------------------------------------------------------------------


def smg(index: str = "event", **settings: float) -> SmgCacheAware:
    return SmgCacheAware(RouterSettings(**settings), block_tokens=16, seed=0, index=index)


def test_smg_event_index_follows_what_each_replica_holds_not_what_was_sent() -> None:
    prompt = tuple(range(10))
    workers = [Worker(0, 1, cached=prompt[:2]), Worker(1, 1, cached=prompt[:8]), Worker(2, 0)]
    assert smg().select(spec(prompt), workers, 0.0) == 1
    # That replica evicted the prompt: the index knows (the tree would still send it there).
    workers[1].cached = ()
    assert smg().select(spec(prompt), workers, 1.0) == 2  # 2 of 10 blocks: a miss at 0.3
    assert smg(cache_threshold=0.1).select(spec(prompt), workers, 1.0) == 0


def test_smg_miss_goes_to_the_fewest_in_flight() -> None:
    workers = [Worker(0, load=3), Worker(1, load=1), Worker(2, load=2)]
    assert smg().select(spec((7, 8, 9)), workers, 0.0) == 1


@pytest.mark.parametrize(
    ("holder_load", "chosen"),
    # Loads (h, 5, 1): with h = 7 the mean is 4.33, so 7 > 1.5 x 4.33 but not > 4.33 + 4.16.
    [(7, 0), (10, 2), (100, 2)],
    ids=["past-the-ratio-not-the-margin", "past-both-spills", "far-past-both-spills"],
)
def test_smg_spill_gate_needs_both_thresholds(holder_load: int, chosen: int) -> None:
    prompt = tuple(range(10))
    workers = [Worker(0, load=holder_load, cached=prompt), Worker(1, load=5), Worker(2, load=1)]
    assert smg().select(spec(prompt), workers, 0.0) == chosen


@pytest.mark.parametrize(
    ("abs_threshold", "mean", "margin"),
    [(64, 0.0, 4.0), (64, 25.0, 10.0), (64, 10_000.0, 64.0), (2, 25.0, 2.0)],
    ids=["idle-floor-of-4", "two-sigma", "capped-by-the-threshold", "threshold-below-4"],
)
def test_smg_spill_margin(abs_threshold: int, mean: float, margin: float) -> None:
    assert spill_margin(abs_threshold, mean) == margin


def test_smg_tree_index_follows_what_it_sent() -> None:
    router = smg("tree")
    workers = [Worker(0), Worker(1, load=5)]
    prompt = tuple(range(10))
    first = router.select(spec(prompt), workers, 0.0)
    workers[first].load = 9  # busier, but under the spill gate
    assert router.select(spec(prompt), workers, 1.0) == first


def test_round_robin_cycles() -> None:
    workers = [Worker(0), Worker(1), Worker(2)]
    router = RoundRobin()
    assert [router.select(spec((1,)), workers, 0.0) for _ in range(4)] == [0, 1, 2, 0]


def test_least_load_takes_the_shortest_queue() -> None:
    assert LeastLoad().select(spec((1,)), [Worker(0, 5), Worker(1, 2), Worker(2, 2)], 0.0) == 1


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "two-workers-share-the-bound"])
def test_smg_tree_is_cut_back_to_its_size_bound_each_interval(workers: int) -> None:
    bound = 16 * 4 * 10  # ten blocks of 16 tokens at 4 characters a token
    router = smg("tree", max_tree_size_chars=bound, eviction_interval_s=60.0)
    pool = [Worker(i) for i in range(workers)]
    for k in range(20):
        router.select(spec(tuple(range(k * 100, k * 100 + 5))), pool, float(k))
    assert sum(router.tree.size.values()) > bound  # nothing evicted within the interval
    router.select(spec((99_999,)), pool, 61.0)  # past the interval: cut back after this one
    assert sum(router.tree.size.values()) <= bound


def test_tree_eviction_and_removal_keep_sizes_and_nodes_consistent() -> None:
    router = smg("tree", max_tree_size_chars=64 * 40 * 3)
    workers = [Worker(0), Worker(1), Worker(2)]
    for k in range(300):
        shared = (1000 + k % 7, 2000 + k % 5)
        router.select(spec(shared + tuple(range(k * 10, k * 10 + 1 + k % 4))), workers, k)
    router.tree.evict_by_size(64 * 40)
    router.forget(1)
    tree = router.tree

    def walk(node: Any) -> list[Any]:
        return [node, *(n for child in node.children.values() for n in walk(child))]

    nodes = walk(tree.root)[1:]
    for tenant in (0, 2):
        held = [n for n in nodes if tenant in n.tenants]
        assert tree.size[tenant] == sum(len(n.key) for n in held) * 64
        assert tree.size[tenant] <= 64 * 40
    assert all(n.tenants or n.children for n in nodes)
    assert all(1 not in n.tenants for n in nodes)


def _walk(node: Any) -> list[Any]:
    return [node, *(n for child in node.children.values() for n in _walk(child))]


def _reference_eviction(tree: ApproxTree, tenant: int, max_chars: float) -> set[tuple[Any, ...]]:
    """tree.rs's rule done the slow way: every node of the worker, oldest first, leaves first."""
    held = [n for n in _walk(tree.root)[1:] if tenant in n.tenants]
    size = tree.size[tenant]
    evicted: set[int] = set()
    for node in sorted(held, key=lambda n: (n.tenants[tenant], -n.depth)):
        if size <= max_chars:
            break
        if any(tenant in c.tenants and id(c) not in evicted for c in node.children.values()):
            continue
        evicted.add(id(node))
        size -= len(node.key) * tree.chars_per_block
    return {_path(n) for n in held if id(n) not in evicted}


def _path(node: Any) -> tuple[Any, ...]:
    keys: list[Any] = []
    while node.parent is not None:
        keys[:0] = node.key
        node = node.parent
    return tuple(keys)


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=6), min_size=1, max_size=40),
    limits=st.lists(st.integers(0, 30), min_size=1, max_size=4),
)
def test_tree_eviction_matches_evicting_in_full_lru_order(
    prompts: list[list[int]], limits: list[int]
) -> None:
    """The per-worker eviction heap keeps exactly the nodes a full sort would keep."""
    tree = ApproxTree(chars_per_block=1.0)
    tree.add_tenant(0, 0.0)
    clock = 0.0
    for round_, limit in enumerate(limits):
        for blocks in prompts[round_::2] or prompts:
            clock += 1.0
            tree.insert(tuple(blocks), 0, clock)
            _, node = tree.prefix_match(tuple(blocks[:2]))
            tree.touch(node, 0, clock)
        expected = _reference_eviction(tree, 0, limit)
        tree.evict_by_size(limit)
        kept = {_path(n) for n in _walk(tree.root)[1:] if 0 in n.tenants}
        assert kept == expected
        held = [n for n in _walk(tree.root)[1:] if 0 in n.tenants]
        assert tree.size[0] == sum(len(n.key) for n in held)


def test_smg_tree_forgets_a_removed_worker() -> None:
    router = smg("tree")
    router.select(spec((1, 2, 3)), [Worker(0)], 0.0)
    router.forget(0)
    assert 0 not in router.tree.size
    assert router.select(spec((1, 2, 3)), [Worker(1)], 1.0) == 0


# -- Knative KPA ---------------------------------------------------------------------------------


def observation(*, ready: int, concurrency: float, buffered: int = 0) -> ServiceObservation:
    replicas = [ReplicaView(id=i, state="ready", created_at=0.0, in_flight=0) for i in range(ready)]
    return ServiceObservation(
        region="r",
        model="m",
        replicas=replicas,
        concurrency=int(concurrency),
        mean_concurrency=concurrency,
        buffered=buffered,
        arrivals=0,
        finished=0,
        min_replicas=0,
        max_replicas=100,
    )


def drive(kpa: Kpa, *, ready: int, concurrency: float, start: float, seconds: float) -> int:
    desired, t = ready, start
    while t < start + seconds:
        desired = kpa.desired_replicas(observation(ready=ready, concurrency=concurrency), t)
        t += kpa.tick_s
    return desired


def test_kpa_targets_seventy_concurrent_per_pod() -> None:
    kpa = Kpa()
    assert drive(kpa, ready=2, concurrency=140.0, start=0.0, seconds=120.0) == 2
    assert drive(kpa, ready=2, concurrency=290.0, start=120.0, seconds=120.0) == 5


def test_kpa_holds_during_its_first_stable_window() -> None:
    kpa = Kpa()
    assert drive(kpa, ready=4, concurrency=0.0, start=0.0, seconds=58.0) == 4


def test_kpa_panics_on_a_burst_and_never_scales_down_in_panic() -> None:
    kpa = Kpa()
    drive(kpa, ready=1, concurrency=10.0, start=0.0, seconds=120.0)
    # 6 s at 500 concurrent: the panic window sees it long before the stable window.
    burst = drive(kpa, ready=1, concurrency=500.0, start=120.0, seconds=6.0)
    assert burst >= 4
    assert kpa.desired_replicas(observation(ready=burst, concurrency=0.0), 128.0) >= burst


def test_kpa_scales_to_zero_after_the_grace_period() -> None:
    kpa = Kpa(KpaSettings())
    drive(kpa, ready=1, concurrency=5.0, start=0.0, seconds=100.0)
    # Idle: the stable window empties after 60 s, then 30 s of grace keep the last pod.
    assert drive(kpa, ready=1, concurrency=0.0, start=100.0, seconds=70.0) == 1
    assert drive(kpa, ready=1, concurrency=0.0, start=170.0, seconds=40.0) == 0


def test_kpa_wakes_from_zero_on_a_buffered_request() -> None:
    kpa = Kpa()
    drive(kpa, ready=0, concurrency=0.0, start=0.0, seconds=100.0)
    assert kpa.desired_replicas(observation(ready=0, concurrency=0.0, buffered=1), 100.0) == 1


# -- Route 53 -------------------------------------------------------------------------------------


def fleet(up: dict[str, bool]) -> FleetObservation:
    return FleetObservation(
        [
            RegionObservation(
                name=n,
                endpoint_up=u,
                requests=0,
                failed=0,
                ttft_ok=0,
                ready_replicas=1,
                active_replicas=1,
            )
            for n, u in up.items()
        ]
    )


def test_route53_fails_over_after_three_failed_checks() -> None:
    route53 = Route53(parse_scenario(SMALL, source="small.yaml"))
    down = fleet({"us-east": True, "eu-west": False})
    assert route53.decide(down, 30.0).weights["eu-west"] == {"eu-west": 1.0}
    assert route53.decide(down, 60.0).weights["eu-west"] == {"eu-west": 1.0}
    weights = route53.decide(down, 90.0).weights
    assert weights["eu-west"] == {"us-east": 1.0, "eu-west": 0.0}
    assert weights["us-east"] == {"us-east": 1.0}


@pytest.mark.parametrize("checks", [1, 2, 3])
def test_route53_fails_back_after_three_good_checks(checks: int) -> None:
    route53 = Route53(parse_scenario(SMALL, source="small.yaml"))
    for t in (30.0, 60.0, 90.0):
        route53.decide(fleet({"us-east": True, "eu-west": False}), t)
    for k in range(checks):
        weights = route53.decide(fleet({"us-east": True, "eu-west": True}), 120.0 + 30 * k).weights
    assert (weights["eu-west"] == {"eu-west": 1.0}) == (checks == 3)


def test_route53_answers_every_record_when_none_is_healthy() -> None:
    route53 = Route53(parse_scenario(SMALL, source="small.yaml"))
    for t in (30.0, 60.0, 90.0):
        weights = route53.decide(fleet({"us-east": False, "eu-west": False}), t).weights
    assert weights["us-east"] == {"us-east": 1.0}


@settings(max_examples=200, deadline=None)
@given(weight=st.integers(0, 100), baseline=st.booleans())
def test_the_entrys_split_gives_the_baseline_the_canarys_share(weight: int, baseline: bool) -> None:
    """Over a fine grid of draws the canary gets its weight, a serving baseline as much again
    (never more than the rest), the stable revision the rest; without one nothing goes to it."""
    draws = [(i + 0.5) / 10_000 for i in range(10_000)]  # midpoints: no draw on a boundary
    served = [0, 0, 0]
    for u in draws:
        served[pick_revision(u, weight=weight, canary=True, baseline=baseline)] += 1
    expected_baseline = min(weight, 100 - weight) if baseline else 0
    assert served[1] == weight * 100
    assert served[2] == expected_baseline * 100
    assert served[0] == 10_000 - served[1] - served[2]
