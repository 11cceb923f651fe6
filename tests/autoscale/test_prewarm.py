"""Pre-warming's decisions (`radixfleet/controllers/autoscale/prewarm.py`): which prefixes, and when
a replica may be held back for them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.controllers.autoscale.prewarm import may_hold_back, plan
from radixfleet.controllers.autoscale.spec import Prewarm
from radixfleet.prefixes import PrefixPopularity, depths
from radixfleet.twin.interfaces import Waiting

SPEC = Prewarm(kv_fraction=0.5)  # half the KV cache, prefixes seen twice


def _prompt(system: str, system_blocks: int, question: int, blocks: int = 2) -> list[str]:
    return [f"{system}-{i}" for i in range(system_blocks)] + [
        f"q{question}-{i}" for i in range(blocks)
    ]


def test_the_shared_system_prompt_is_the_pick_not_the_questions() -> None:
    popularity = PrefixPopularity()
    for question in range(20):
        popularity.record(_prompt("sys", 16, question), now=float(question))
    (picked,) = plan(popularity, SPEC, kv_blocks=1000, now=20.0)
    assert picked == tuple(f"sys-{i}" for i in range(16))  # 16 is on the ladder of depths


def test_hotter_prefixes_come_first_when_the_cache_is_small() -> None:
    popularity = PrefixPopularity()
    for question in range(30):
        popularity.record(_prompt("hot", 24, question), now=1.0)
    for question in range(3):
        popularity.record(_prompt("cold", 24, question), now=1.0)
    picked = plan(popularity, SPEC, kv_blocks=60, now=1.0)  # room for 30 blocks
    assert picked[0] == tuple(f"hot-{i}" for i in range(24))
    assert all(len(p) <= 6 for p in picked[1:]), "the colder prefix fits only in what is left"


@pytest.mark.parametrize("shared", [5, 20, 29, 40], ids=lambda n: f"{n}-blocks")
def test_a_shared_prefix_between_two_depths_of_the_ladder_is_picked_whole(shared: int) -> None:
    """The ladder records 16, 24, 32, 48 blocks; a 20-block system prompt was picked at 16."""
    popularity = PrefixPopularity()
    for question in range(6):
        popularity.record(_prompt("sys", shared, question, blocks=12), now=1.0)
    assert plan(popularity, SPEC, kv_blocks=1000, now=1.0) == [
        tuple(f"sys-{i}" for i in range(shared))
    ]


def test_counts_fade_with_their_half_life() -> None:
    popularity = PrefixPopularity(half_life_s=60.0)
    for question in range(4):
        popularity.record(_prompt("old", 8, question), now=0.0)
    assert plan(popularity, SPEC, kv_blocks=1000, now=0.0)
    assert plan(popularity, SPEC, kv_blocks=1000, now=120.0) == []  # 4 -> 1 < minHits 2


def test_the_memory_is_bounded() -> None:
    popularity = PrefixPopularity(capacity=64)
    for question in range(200):
        popularity.record(_prompt(f"s{question}", 4, question), now=float(question))
    assert len(popularity) <= 64


prompts = st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=40), min_size=1, max_size=40)


@given(prompts, st.integers(1, 300))
def test_a_plan_fits_its_budget_and_never_repeats_itself(
    recorded: list[list[int]], kv_blocks: int
) -> None:
    popularity = PrefixPopularity()
    for n, blocks in enumerate(recorded):
        popularity.record(blocks, now=float(n))
    picked = plan(popularity, SPEC, kv_blocks=kv_blocks, now=float(len(recorded)))
    distinct = {p[:depth] for p in picked for depth in range(1, len(p) + 1)}
    assert len(distinct) <= int(kv_blocks * SPEC.kv_fraction)  # blocks the picks put in cache
    for a in picked:
        assert not any(b != a and b[: len(a)] == a for b in picked), "one pick covers another"


@pytest.mark.parametrize(
    ("serving", "waiting", "held"),
    [
        pytest.param(2, Waiting(), True, id="peers-serve-nothing-waits"),
        pytest.param(0, Waiting(), False, id="waking-from-zero"),
        pytest.param(0, Waiting(held=3), False, id="requests-wait-in-the-activator"),
        pytest.param(2, Waiting(held=1), False, id="a-request-is-held-though-peers-serve"),
        pytest.param(2, Waiting(queued=4), True, id="queues-within-the-allowance"),
        pytest.param(2, Waiting(queued=5), False, id="a-backlog-at-the-serving-replicas"),
    ],
)
def test_a_replica_is_held_back_only_when_no_request_needs_it(
    serving: int, waiting: Waiting, held: bool
) -> None:
    assert may_hold_back(serving=serving, waiting=waiting, allowance=2.0) is held


def test_the_ladder_of_depths() -> None:
    assert depths(100) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)


def test_counts_survive_days_of_virtual_time() -> None:
    """Forward decay rescales before its factor overflows: a week later, a fresh count is 1."""
    popularity = PrefixPopularity(half_life_s=60.0)
    for day in range(8):
        popularity.record(["a", "b"], now=day * 86_400.0)
    scores = popularity.scores(7 * 86_400.0)
    assert scores[("a",)] == pytest.approx(1.0) and scores[("a", "b")] == pytest.approx(1.0)
