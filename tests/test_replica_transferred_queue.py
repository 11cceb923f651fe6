"""A P/D decode replica's requests in the replica model (`RequestSpec.transferred_tokens`): no
stall from other prompts as on a colocated replica, and the wait for KV room (SGLang's decode
prealloc queue) in its queue, which never lets the KV overflow."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import EventKind, Phase, ReplicaModel, Request, RequestSpec

PROFILE = ReplicaProfile()


def spec(rid: str, prompt: int, output: int, *, transferred: bool = True) -> RequestSpec:
    return RequestSpec(
        rid=rid,
        prompt_tokens=prompt,
        output_tokens=output,
        max_new_tokens=output,
        transferred_tokens=prompt if transferred else 0,
    )


def play(model: ReplicaModel, *, until: float = float("inf")) -> float:
    """Advance `model` through every pass ending by `until`; the time of the last."""
    now = 0.0
    while (when := model.next_event_time()) is not None and when <= until:
        model.advance(when)
        now = when
    return now


def test_a_transferred_request_decodes_at_once_without_a_prefill_pass() -> None:
    model = ReplicaModel(profile=PROFILE, now=0.0, warm=True)
    request = model.submit(spec("a", 4000, 101), now=1.0)
    events = model.advance(1.0)
    assert [e.kind for e in events] == [EventKind.FIRST_TOKEN]
    assert request.first_token_at == 1.0  # its prompt was computed by the prefill replica
    play(model)
    # 100 decode steps over one request whose context grows from 4001 tokens.
    steps = sum(PROFILE.decode_step_seconds(1, 4001 + k) for k in range(100))
    assert request.phase is Phase.FINISHED
    assert request.mean_itl == pytest.approx(steps / 100, rel=1e-9)


def _mean_itl_beside_new_prompts(*, transferred: bool) -> float:
    """The mean ITL of one long answer while twenty 8k-token prompts arrive beside it."""
    model = ReplicaModel(profile=PROFILE, now=0.0, warm=True)
    watched = model.submit(spec("watched", 1000, 1001, transferred=transferred), now=0.0)
    for n in range(20):
        at = 0.2 * (n + 1)
        play(model, until=at)
        model.submit(spec(f"other-{n}", 8000, 2, transferred=transferred), now=at)
    play(model)
    assert watched.mean_itl is not None
    return watched.mean_itl


def test_prompts_arriving_do_not_stall_a_decode_replica_as_they_stall_a_colocated_one() -> None:
    alone = PROFILE.decode_step_seconds(1, 1500)
    decode_only = _mean_itl_beside_new_prompts(transferred=True)
    colocated = _mean_itl_beside_new_prompts(transferred=False)
    # Twenty 8k-token prefills (~0.25 s each) cost a colocated answer of 1000 tokens about
    # 5 ms a token; on a decode replica the others only join the batch for one step.
    assert decode_only < 1.2 * alone
    assert colocated > 1.5 * decode_only


def test_a_request_waits_for_kv_room_in_the_prealloc_queue() -> None:
    small = ReplicaProfile(kv_capacity_tokens=10_000)
    model = ReplicaModel(profile=small, now=0.0, warm=True)
    first = model.submit(spec("first", 6000, 50), now=0.0)
    second = model.submit(spec("second", 6000, 50), now=0.0)
    model.advance(0.0)
    assert first.first_token_at == 0.0
    assert second.first_token_at is None
    assert model.stats(0.0).num_queue_reqs == 1
    play(model)
    assert first.finished_at is not None and second.first_token_at is not None
    assert second.first_token_at >= first.finished_at  # its 6,049 tokens fit only then
    assert second.phase is Phase.FINISHED


def test_a_request_aborted_in_the_prealloc_queue_leaves_it() -> None:
    small = ReplicaProfile(kv_capacity_tokens=10_000)
    model = ReplicaModel(profile=small, now=0.0, warm=True)
    model.submit(spec("first", 6000, 50), now=0.0)
    waiting = model.submit(spec("second", 6000, 50), now=0.0)
    assert model.abort("second", now=0.1)
    assert waiting.phase is Phase.ABORTED
    assert model.stats(0.1).num_queue_reqs == 0
    play(model)
    assert model.stats(10.0).kv_used_tokens == 0


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=2.0),
            st.integers(min_value=1, max_value=7000),
            st.integers(min_value=1, max_value=300),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_every_transferred_request_ends_and_kv_never_overflows(
    requests: list[tuple[float, int, int]],
) -> None:
    """Whatever arrives, the KV in use stays within the pool and every request finishes,
    its first token no earlier than its arrival."""
    small = ReplicaProfile(kv_capacity_tokens=8_000)
    model = ReplicaModel(profile=small, now=0.0, warm=True)
    taken: list[Request] = []
    for n, (at, prompt, output) in enumerate(sorted(requests)):
        play(model, until=at)
        taken.append(model.submit(spec(f"r{n}", prompt, output), now=at))
        assert model.stats(at).kv_used_tokens <= small.kv_capacity_tokens
    while (when := model.next_event_time()) is not None:
        model.advance(when)
        assert model.stats(when).kv_used_tokens <= small.kv_capacity_tokens
    for request in taken:
        assert request.phase is Phase.FINISHED
        assert request.first_token_at is not None
        assert request.first_token_at >= request.arrival
