"""The replica model's HiCache tiers: blocks the GPU evicts are loaded back from the host or a
shared storage tier instead of recomputed, each tier bounded and LRU, in virtual time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaModel, Request, RequestSpec
from radixfleet.replica.tiers import (
    HostTierSpec,
    TierStore,
    WritePolicy,
    host_tier_tokens,
)

BLOCK = 16
# A GPU that holds four 1,024-token prompts: the fifth evicts the first.
SMALL_GPU = ReplicaProfile(kv_capacity_tokens=4096)


def spec(group: int, rid: str, *, tokens: int = 1024) -> RequestSpec:
    return RequestSpec(
        rid=rid,
        prompt_tokens=tokens,
        output_tokens=4,
        max_new_tokens=4,
        prompt_blocks=tuple((group, i) for i in range(tokens // BLOCK)),
    )


def model(**tiers: object) -> ReplicaModel:
    return ReplicaModel(profile=SMALL_GPU, now=0.0, warm=True, block_tokens=BLOCK, **tiers)  # type: ignore[arg-type]


def serve(replica: ReplicaModel, groups: list[int], *, start: float = 0.0) -> list[Request]:
    """Send one prompt per group, each after the one before has finished."""
    now, done = start, []
    for index, group in enumerate(groups):
        request = replica.submit(spec(group, f"{start}-{index}"), now=now)
        while not request.done:
            now = replica.next_event_time() or now
            replica.advance(now)
        done.append(request)
    return done


# Groups 0..5 pass through a GPU of four, then group 0 comes back: evicted from the GPU.
EVICTED_THEN_ASKED = [0, 1, 2, 3, 4, 5, 0]


def test_a_prefix_the_gpu_evicted_is_loaded_from_the_host_faster_than_it_is_recomputed() -> None:
    gpu_only = serve(model(), EVICTED_THEN_ASKED)[-1]
    tiered = serve(model(host_tier=HostTierSpec(tokens=16_384)), EVICTED_THEN_ASKED)[-1]
    assert gpu_only.cached_tokens == 0
    # SGLang recomputes the last prompt token, so a hit stops one block short of the prompt.
    assert tiered.cached_tokens == tiered.host_cached_tokens == 1024 - BLOCK
    assert tiered.ttft is not None and gpu_only.ttft is not None
    assert tiered.ttft < gpu_only.ttft / 2


def test_a_host_hit_costs_its_transfer_and_a_gpu_hit_does_not() -> None:
    # A profile whose PCIe is so slow that loading dominates the pass.
    slow_link = SMALL_GPU.model_copy(update={"host_to_device_gb_s": 0.1})
    replica = ReplicaModel(
        profile=slow_link,
        now=0.0,
        warm=True,
        block_tokens=BLOCK,
        host_tier=HostTierSpec(tokens=16_384),
    )
    from_host = serve(replica, EVICTED_THEN_ASKED)[-1]
    from_gpu = serve(replica, [0], start=100.0)[-1]  # group 0 is back on the GPU now
    load = slow_link.load_seconds(host_tokens=1024 - BLOCK, storage_tokens=0)
    assert from_host.ttft == pytest.approx(load, rel=0.01)
    assert from_gpu.host_cached_tokens == 0 and from_gpu.cached_tokens == 1024 - BLOCK
    assert from_gpu.ttft is not None and from_gpu.ttft < load / 10


@pytest.mark.parametrize(
    ("policy", "backed_up_before_eviction"),
    [
        pytest.param(WritePolicy.WRITE_THROUGH, 3 * 1024, id="write-through-copies-at-caching"),
        pytest.param(WritePolicy.WRITE_BACK, 0, id="write-back-copies-at-eviction"),
        pytest.param(WritePolicy.WRITE_THROUGH_SELECTIVE, 0, id="selective-copies-hit-blocks"),
    ],
)
def test_each_write_policy_copies_to_the_host_when_sglang_does(
    policy: WritePolicy, backed_up_before_eviction: int
) -> None:
    replica = model(host_tier=HostTierSpec(tokens=16_384, write_policy=policy))
    serve(replica, [0, 1, 2])  # three quarters of the GPU: nothing evicted
    assert replica.stats(50.0).counters.evicted_tokens_total == 0
    assert replica.stats(50.0).counters.backup_tokens_total == backed_up_before_eviction
    asked_again = serve(replica, [1, 3, 4, 5, 0], start=100.0)
    # Group 0 was never hit again before it was evicted: only the selective policy lost it.
    expected = 0 if policy is WritePolicy.WRITE_THROUGH_SELECTIVE else 1024 - BLOCK
    assert asked_again[-1].host_cached_tokens == expected


def test_the_host_tier_is_process_memory_and_a_shared_storage_tier_outlives_it() -> None:
    storage = TierStore(capacity_tokens=1 << 20, block_tokens=BLOCK)
    first = model(host_tier=HostTierSpec(tokens=16_384), storage=storage)
    serve(first, [0, 1, 2, 3, 4])
    first.crash(now=60.0)
    first.restart(now=61.0)
    assert first.stats(61.0).host_used_tokens == 0
    # Another replica of the same model, sharing the backend, finds what the first wrote.
    second = model(host_tier=HostTierSpec(tokens=16_384), storage=storage)
    again = serve(second, [0])[-1]
    assert again.storage_cached_tokens == 1024 - BLOCK
    assert again.cached_tokens == again.storage_cached_tokens
    assert second.stats(100.0).host_used_tokens >= 1024 - BLOCK  # prefetched through the host


def test_a_flush_empties_the_host_tier_with_the_gpu() -> None:
    replica = model(host_tier=HostTierSpec(tokens=16_384))
    serve(replica, [0, 1, 2, 3, 4])
    assert replica.stats(100.0).host_used_tokens > 0
    assert replica.flush_cache(now=100.0)
    assert replica.stats(100.0).host_used_tokens == 0


def test_storage_without_a_host_tier_is_refused_as_sglang_stages_through_the_host() -> None:
    with pytest.raises(ValueError, match="needs a host tier"):
        model(storage=TierStore(capacity_tokens=4096, block_tokens=BLOCK))


@pytest.mark.parametrize(
    ("size_gb", "ratio", "expected"),
    [
        pytest.param(0, None, 2 * 420_000, id="default-ratio-2"),
        pytest.param(0, 3.0, 3 * 420_000, id="ratio"),
        pytest.param(100, 3.0, 100 * 10**9 // 131_072, id="size-overrides-ratio"),
    ],
)
def test_the_host_tier_is_sized_from_sglangs_flags(
    size_gb: int, ratio: float | None, expected: int
) -> None:
    tokens = host_tier_tokens(
        size_gb=size_gb, ratio=ratio, device_tokens=420_000, bytes_per_token=131_072, ranks=1
    )
    assert tokens == expected


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.integers(0, 12), min_size=1, max_size=40),
    host_blocks=st.integers(1, 600),
    policy=st.sampled_from(list(WritePolicy)),
    shared=st.booleans(),
)
def test_tiers_stay_within_capacity_and_every_cached_token_has_one_source(
    groups: list[int], host_blocks: int, policy: WritePolicy, shared: bool
) -> None:
    storage = TierStore(capacity_tokens=128 * BLOCK, block_tokens=BLOCK) if shared else None
    replica = model(
        host_tier=HostTierSpec(tokens=host_blocks * BLOCK, write_policy=policy), storage=storage
    )
    for request in serve(replica, groups):
        assert request.cached_tokens < request.spec.prompt_tokens
        assert request.host_cached_tokens + request.storage_cached_tokens <= request.cached_tokens
    stats = replica.stats(10_000.0)
    assert stats.host_used_tokens <= stats.host_total_tokens == host_blocks * BLOCK
    assert storage is None or storage.used_tokens <= storage.capacity_tokens
    counters = stats.counters
    assert counters.device_cached_tokens_total >= 0
    assert counters.cached_tokens_total <= counters.prompt_tokens_total
