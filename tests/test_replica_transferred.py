"""Tests of a P/D decode replica's requests in the replica model: KV a prefill peer sent takes
GPU room and no prefill pass (RequestSpec.transferred_tokens)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaModel, RequestSpec
from radixfleet.replica.timing import decode_run_seconds, prefill_pass_seconds

PROFILE = ReplicaProfile()
BLOCK = 16


def _spec(rid: str, *, prompt: int, output: int, transferred: int = 0) -> RequestSpec:
    return RequestSpec(
        rid=rid,
        prompt_tokens=prompt,
        output_tokens=output,
        max_new_tokens=output,
        prompt_blocks=tuple((rid, index) for index in range(prompt // BLOCK)),
        transferred_tokens=transferred,
    )


def _drain(model: ReplicaModel) -> None:
    while (when := model.next_event_time()) is not None:
        model.advance(when)


def test_received_kv_starts_decoding_at_once() -> None:
    model = ReplicaModel(profile=PROFILE, now=0.0, warm=True)
    request = model.submit(_spec("d", prompt=4000, output=10, transferred=4000), now=0.0)
    _drain(model)
    assert request.ttft == 0.0  # the first token came with the KV
    decode = decode_run_seconds(PROFILE, steps=9, batch=1, context=4001, slowdown=1.0)
    assert request.e2e_latency == pytest.approx(decode)
    assert request.cached_tokens == 0  # a transfer is not a prefix-cache hit


def test_a_colocated_request_pays_its_prefill() -> None:
    model = ReplicaModel(profile=PROFILE, now=0.0, warm=True)
    request = model.submit(_spec("c", prompt=4000, output=10), now=0.0)
    _drain(model)
    assert request.ttft == pytest.approx(PROFILE.prefill_seconds(4000, 0))


def test_received_kv_takes_gpu_room() -> None:
    model = ReplicaModel(profile=PROFILE, now=0.0, warm=True)
    spec = _spec("d", prompt=4000, output=1000, transferred=4000)
    model.submit(spec, now=0.0)
    model.advance(0.05)
    assert model.stats(0.05).kv_used_tokens >= 4000


def test_more_transferred_than_the_prompt_is_capped() -> None:
    model = ReplicaModel(profile=PROFILE, now=0.0, warm=True)
    spec = replace(_spec("d", prompt=100, output=2), transferred_tokens=10_000)
    request = model.submit(spec, now=0.0)
    _drain(model)
    assert request.prefilled_tokens == 100


def test_a_pass_with_nothing_to_compute_takes_no_time() -> None:
    # Two received prompts in one batch: no overhead, and never a negative time.
    assert prefill_pass_seconds(PROFILE, chunks=[(0, 4000), (0, 800)], slowdown=1.0) == 0.0
    assert prefill_pass_seconds(PROFILE, chunks=[(0, 4000), (10, 0)], slowdown=1.0) > 0.0
