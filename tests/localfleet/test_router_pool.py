"""How the entry spreads a revision's requests over its router replicas (`RouterPool`).

A prefix-spread pool sends every request that opens alike to one replica and spreads distinct
openings evenly; adding a replica moves only what the new replica wins (rendezvous hashing).
A random pool draws from the generator it is given; a pool of one is that router.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.localfleet.entry import AFFINITY_CHARS, RouterPool, affinity_text, as_pool

URLS = tuple(f"http://127.0.0.1:{port}" for port in (9001, 9002, 9003, 9004))
openings = st.text(min_size=1, max_size=300)


@given(system=openings, tail_a=st.text(max_size=50), tail_b=st.text(max_size=50))
def test_requests_that_open_alike_meet_one_router(system: str, tail_a: str, tail_b: str) -> None:
    pool = RouterPool(URLS[:3])
    shared = system * (AFFINITY_CHARS // len(system) + 1)  # a system prompt past the window
    rng = random.Random(0)
    assert pool.pick({"prompt": shared + tail_a}, rng) == pool.pick(
        {"prompt": shared + tail_b}, rng
    )


@given(prompts=st.lists(openings, min_size=1, max_size=40, unique=True))
def test_adding_a_router_moves_only_what_the_new_one_wins(prompts: list[str]) -> None:
    before, after = RouterPool(URLS[:3]), RouterPool(URLS)
    rng = random.Random(0)
    for prompt in prompts:
        body = {"prompt": prompt}
        moved_to = after.pick(body, rng)
        assert moved_to in (before.pick(body, rng), URLS[3])


@pytest.mark.parametrize("count", [2, 3, 4], ids=lambda n: f"{n}-routers")
def test_distinct_openings_spread_evenly(count: int) -> None:
    pool, rng = RouterPool(URLS[:count]), random.Random(0)
    picks = Counter(pool.pick({"prompt": f"system prompt of tenant {i}"}, rng) for i in range(600))
    assert set(picks) == set(URLS[:count])
    assert min(picks.values()) > 0.6 * 600 / count, picks


def test_a_random_pool_draws_from_its_generator() -> None:
    pool = RouterPool(URLS[:2], spread="random")
    same = [pool.pick({"prompt": "same"}, random.Random(seed)) for seed in range(40)]
    assert set(same) == set(URLS[:2])  # one prompt, both routers
    assert pool.pick({"prompt": "x"}, random.Random(7)) == pool.pick(
        {"prompt": "y"}, random.Random(7)
    )


def test_a_single_router_is_its_own_pool() -> None:
    assert as_pool(URLS[0]) == RouterPool((URLS[0],))
    assert as_pool(RouterPool(URLS)).urls == URLS
    assert RouterPool(URLS).key == URLS[0]


@pytest.mark.parametrize(
    "body",
    [{"prompt": "p"}, {"text": "p"}, {"messages": [{"role": "user", "content": "p"}]},
     {"input_ids": [1, 2, 3]}],
    ids=["completion", "generate-text", "chat", "generate-ids"],
)  # fmt: skip
def test_every_prompt_form_has_an_opening(body: dict[str, object]) -> None:
    opening = affinity_text(body)
    assert opening not in ("", "null")
    assert len(affinity_text({"prompt": "x" * 5000})) == AFFINITY_CHARS


def test_chats_behind_one_long_system_prompt_meet_one_router() -> None:
    pool, rng = RouterPool(URLS), random.Random(0)
    system = {"role": "system", "content": "You are the billing assistant. " * 2000}  # 62 kB

    def chat(question: str) -> dict[str, object]:
        return {"messages": [system, {"role": "user", "content": question}]}

    assert len({pool.pick(chat(f"question {q}"), rng) for q in range(20)}) == 1
    assert affinity_text(chat("x")) == "system:" + system["content"][: AFFINITY_CHARS - 7]
