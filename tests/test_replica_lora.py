"""Tests of the replica model's LoRA adapters: loading, bounds, eviction, pinning, GPU slots and
the cost of mixing adapters in a batch, in virtual time (radixfleet/replica/lora.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import Phase, RejectedError, RejectReason, ReplicaModel, RequestSpec
from radixfleet.replica.lora import AdapterSpec, EvictionPolicy, LoraError, LoraPool, LoraSpec

PROFILE = ReplicaProfile()
BLOCK = 16


def adapter(name: str, *, pinned: bool = False, rank: int = 16) -> AdapterSpec:
    return AdapterSpec(name=name, path=f"/adapters/{name}", rank=rank, pinned=pinned)


def model(lora: LoraSpec | None = None, profile: ReplicaProfile = PROFILE) -> ReplicaModel:
    return ReplicaModel(profile=profile, now=0.0, warm=True, lora=lora)


def spec(rid: str, *, adapter: str | None = None, prompt: int = 64, output: int = 8) -> RequestSpec:
    return RequestSpec(
        rid=rid,
        prompt_tokens=prompt,
        output_tokens=output,
        max_new_tokens=output,
        prompt_blocks=tuple((rid, i) for i in range(prompt // BLOCK)),
        adapter=adapter,
    )


def drain(replica: ReplicaModel) -> None:
    while (when := replica.next_event_time()) is not None:
        replica.advance(when)


def running_adapters(replica: ReplicaModel) -> set[str | None]:
    # The scheduler's own sets: what is in the batch, not what the pool thinks.
    running = [*replica._prefilling, *replica._decode.requests]
    return {request.spec.adapter for request in running}


# -- the pool ---------------------------------------------------------------------------------


def test_load_takes_the_read_time_and_loads_queue_behind_each_other() -> None:
    pool = LoraPool(spec=LoraSpec(), profile=PROFILE, now=0.0)
    one = pool.load(adapter("a"), now=1.0)
    read = PROFILE.lora_load_overhead_s + 16 * PROFILE.lora_bytes_per_rank / 2e9
    assert one.ready_at == pytest.approx(1.0 + read)
    two = pool.load(adapter("b"), now=1.0)
    assert two.ready_at == pytest.approx(1.0 + 2 * read)  # SGLang's one lock: one at a time
    assert pool.loaded(now=1.0 + read) == [adapter("a")]


def test_a_given_size_overrides_the_rank() -> None:
    sized = AdapterSpec(name="s", path="/s", rank=8, size_bytes=4_000_000_000)
    pool = LoraPool(spec=LoraSpec(), profile=PROFILE, now=0.0)
    assert pool.load_seconds(sized) == pytest.approx(PROFILE.lora_load_overhead_s + 2.0)


def test_loading_past_max_loaded_loras_unloads_the_least_recently_requested() -> None:
    pool = LoraPool(
        spec=LoraSpec(max_loras_per_batch=2, max_loaded_loras=2), profile=PROFILE, now=0.0
    )
    pool.load(adapter("a"), now=0.0)
    pool.load(adapter("b"), now=0.0)
    pool.resolve("a", now=5.0)  # a request for a: b is now the least recently requested
    result = pool.load(adapter("c"), now=5.0)
    assert result.evicted == ("b",)
    assert pool.registered() == ["a", "c"]
    assert pool.evictions_total == 1


def test_a_pinned_adapter_is_never_evicted() -> None:
    pool = LoraPool(
        spec=LoraSpec(max_loras_per_batch=3, max_loaded_loras=3), profile=PROFILE, now=0.0
    )
    pool.load(adapter("p", pinned=True), now=0.0)
    for name in ("a", "b", "c"):
        pool.load(adapter(name), now=0.0)
    assert pool.registered() == ["p", "b", "c"]  # a went, though p was loaded first


def test_pinning_every_slot_but_one_is_refused() -> None:
    pool = LoraPool(spec=LoraSpec(max_loras_per_batch=2), profile=PROFILE, now=0.0)
    pool.load(adapter("p", pinned=True), now=0.0)
    with pytest.raises(LoraError, match="not allowed to pin all slots"):
        pool.load(adapter("q", pinned=True), now=0.0)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("a", "because it is already loaded", id="already-loaded"),
        pytest.param("big", "is incompatible with the current LoRA memory pool", id="rank-too-big"),
    ],
)
def test_a_load_sglang_refuses_says_why(name: str, message: str) -> None:
    pool = LoraPool(spec=LoraSpec(max_lora_rank=64), profile=PROFILE, now=0.0)
    pool.load(adapter("a"), now=0.0)
    with pytest.raises(LoraError, match=message):
        pool.load(adapter(name, rank=128), now=0.0)


def test_unloading_an_unknown_adapter_names_the_loaded_ones() -> None:
    pool = LoraPool(spec=LoraSpec(preloaded=(adapter("a"),)), profile=PROFILE, now=0.0)
    expected = r"LoRA with name x does not exist. Loaded LoRAs: odict_keys\(\['a'\]\)"
    with pytest.raises(LoraError, match=expected):
        pool.unload("x")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"max_loaded_loras": 2}, "greater than or equal to", id="loaded-below-batch"),
        pytest.param(
            {"max_loaded_loras": 4, "preloaded": tuple(adapter(n) for n in "abcde")},
            "should not exceed max_loaded_loras",
            id="too-many-preloaded",
        ),
    ],
)
def test_sglang_start_up_checks_hold(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoraSpec(max_loras_per_batch=4, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", list(EvictionPolicy), ids=lambda p: p.value)
def test_a_gpu_slot_goes_to_the_policy_victim_and_copies_the_new_adapter(
    policy: EvictionPolicy,
) -> None:
    spec_ = LoraSpec(max_loras_per_batch=2, eviction_policy=policy)
    pool = LoraPool(spec=spec_, profile=PROFILE, now=0.0)
    for name in ("a", "b", "c"):
        pool.load(adapter(name), now=0.0)
    assert pool.fetch(["a"]) == pytest.approx(pool.gpu_copy_seconds(adapter("a")))
    pool.fetch(["b"])
    assert pool.fetch(["a"]) == 0.0  # still on the GPU: no copy
    pool.fetch(["c"])
    # LRU: a was used after b, so b goes; FIFO: a came first, so a goes.
    assert pool.on_gpu() == (["a", "c"] if policy is EvictionPolicy.LRU else ["b", "c"])


# -- the scheduler ----------------------------------------------------------------------------


def test_a_request_to_an_adapter_never_loaded_is_refused_with_sglang_text() -> None:
    replica = model(LoraSpec(preloaded=(adapter("a"),)))
    with pytest.raises(RejectedError) as caught:
        replica.submit(spec("r", adapter="nope"), now=0.0)
    assert caught.value.reason is RejectReason.LORA and caught.value.reason.status == 400
    assert "Got LoRA adapter that has never been loaded: nope" in caught.value.message


def test_a_request_naming_an_adapter_without_lora_enabled_is_refused() -> None:
    with pytest.raises(RejectedError, match="but LoRA is not enabled"):
        model().submit(spec("r", adapter="a"), now=0.0)


def test_a_request_waits_for_its_adapter_load_then_runs() -> None:
    replica = model(LoraSpec())
    ready = replica.load_adapter(adapter("a"), now=0.0).ready_at
    request = replica.submit(spec("r", adapter="a"), now=0.0)
    assert replica.next_event_time() == pytest.approx(ready)
    drain(replica)
    assert request.phase is Phase.FINISHED
    assert request.admitted_at == pytest.approx(ready)


def test_an_evicted_adapter_is_loaded_again_when_a_request_names_it() -> None:
    replica = model(LoraSpec(max_loras_per_batch=1, max_loaded_loras=1))
    replica.load_adapter(adapter("a"), now=0.0)
    replica.load_adapter(adapter("b"), now=10.0)  # evicts a
    assert replica.lora is not None and replica.lora.pool.registered() == ["b"]
    request = replica.submit(spec("r", adapter="a"), now=20.0)
    drain(replica)
    assert request.phase is Phase.FINISHED
    assert request.admitted_at == pytest.approx(20.0 + replica.lora.pool.load_seconds(adapter("a")))


def test_a_request_whose_adapter_has_no_gpu_slot_waits_for_one() -> None:
    names = ("a", "b", "c")
    replica = model(LoraSpec(max_loras_per_batch=2, preloaded=tuple(map(adapter, names))))
    requests = [replica.submit(spec(n, adapter=n, output=50), now=0.0) for n in names]
    first_pass_end = replica.next_event_time()
    assert first_pass_end is not None
    replica.advance(first_pass_end)  # b joins a; c finds no slot
    assert running_adapters(replica) == {"a", "b"}
    drain(replica)
    first_done = min(r.finished_at for r in requests[:2] if r.finished_at is not None)
    assert requests[2].admitted_at is not None and requests[2].admitted_at >= first_done


def test_the_base_model_takes_a_slot_as_in_sglang() -> None:
    replica = model(LoraSpec(max_loras_per_batch=1, preloaded=(adapter("a"),)))
    base = replica.submit(spec("base", output=50), now=0.0)
    tuned = replica.submit(spec("tuned", adapter="a"), now=0.0)
    drain(replica)
    assert tuned.admitted_at is not None and base.finished_at is not None
    assert tuned.admitted_at >= base.finished_at


def test_base_requests_on_a_lora_replica_take_the_time_they_take_without_lora() -> None:
    plain, with_lora = model(), model(LoraSpec(preloaded=(adapter("a"),)))
    times = []
    for replica in (plain, with_lora):
        requests = [replica.submit(spec(f"r{i}", output=20), now=i * 0.01) for i in range(5)]
        drain(replica)
        times.append([r.finished_at for r in requests])
    assert times[0] == times[1]


def test_mixing_adapters_makes_a_batch_slower_than_one_adapter() -> None:
    names = tuple(f"a{i}" for i in range(4))
    durations = []
    for mixed in (False, True):
        replica = model(LoraSpec(max_loras_per_batch=8, preloaded=tuple(map(adapter, names))))
        requests = [
            replica.submit(spec(f"r{i}", adapter=names[i] if mixed else "a0", output=100), now=0)
            for i in range(4)
        ]
        drain(replica)
        durations.append(max(r.finished_at or 0.0 for r in requests))
    extra_per_step = 3 * PROFILE.lora_decode_per_adapter_s
    assert durations[1] - durations[0] >= 0.9 * 99 * extra_per_step


def test_a_restart_keeps_the_preloaded_adapters_alone() -> None:
    replica = model(LoraSpec(preloaded=(adapter("a"),)))
    replica.load_adapter(adapter("b"), now=0.0)
    replica.crash(now=1.0)
    replica.restart(now=2.0)
    assert replica.lora is not None and replica.lora.pool.registered() == ["a"]


# -- invariants -------------------------------------------------------------------------------

NAMES = ("a", "b", "c", "d", "e")
operations = st.lists(
    st.tuples(
        st.sampled_from(["load", "pin", "unload", "request", "base"]),
        st.sampled_from(NAMES),
        st.floats(min_value=0.0, max_value=0.3),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations, per_batch=st.integers(min_value=2, max_value=3))
def test_adapter_bounds_hold_whatever_happens(
    ops: list[tuple[str, str, float]], per_batch: int
) -> None:
    lora = LoraSpec(max_loras_per_batch=per_batch, max_loaded_loras=per_batch + 1)
    replica = model(lora)
    pool = replica.lora.pool if replica.lora else None
    assert pool is not None
    now, pinned = 0.0, set()
    for i, (op, name, gap) in enumerate(ops):
        now += gap
        try:
            if op in ("load", "pin"):
                replica.load_adapter(adapter(name, pinned=op == "pin"), now=now)
                pinned |= {name} if op == "pin" else set()
            elif op == "unload" and name not in pinned:
                replica.unload_adapter(name, now=now)
            elif op in ("request", "base"):
                adapter_name = name if op == "request" else None
                replica.submit(spec(f"r{i}", adapter=adapter_name, output=30), now=now)
        except (LoraError, RejectedError):
            pass
        replica.advance(now)
        assert len(running_adapters(replica)) <= per_batch
        assert len(pool.registered()) <= per_batch + 1
        assert pinned <= set(pool.registered())
    drain(replica)
    assert not replica._requests  # every request ran: none starved for a slot
