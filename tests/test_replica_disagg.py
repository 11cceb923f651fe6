"""Tests of the P/D KV transfer model (radixfleet/replica/disagg.py): bytes from the profile,
seconds over the link, SGLang's names checked against its own server-args.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.profile import BUILTIN_PROFILES, ReplicaProfile
from radixfleet.replica.disagg import (
    DEFAULT_BOOTSTRAP_PORT,
    DEFAULT_TRANSFER_BACKEND,
    DISAGGREGATION_MODES,
    TRANSFER_BACKENDS,
    disaggregation_mode,
    kv_bytes,
    transfer_backend,
    transfer_seconds,
)

SERVER_ARGS = Path(__file__).parents[1] / "radixfleet/schemas/sglang/server-args.json"


def test_kv_bytes_of_the_70b_prompt() -> None:
    profile = BUILTIN_PROFILES["4xh100-llama-3.1-70b"]
    # 80 layers x 8 KV heads x 128 x (K and V) x 2 bytes per token.
    assert kv_bytes(profile, 1000) == 1000 * 80 * 8 * 128 * 2 * 2


def test_transfer_of_8k_tokens_on_the_default_link() -> None:
    profile = ReplicaProfile()  # 8B, one GPU: 128 KiB a token over 50 GB/s
    expected = 0.002 + 8192 * 131_072 / 50e9
    assert transfer_seconds(profile, 8192) == pytest.approx(expected)
    assert transfer_seconds(profile, 8192) == pytest.approx(0.0235, abs=0.0005)


def test_a_tp4_replica_moves_its_shards_in_parallel() -> None:
    one_gpu = ReplicaProfile(kv_bytes_per_token=4096, kv_transfer_setup_s=0.0)
    four_gpus = one_gpu.model_copy(update={"gpu_count": 4})
    assert transfer_seconds(four_gpus, 10_000) == pytest.approx(
        transfer_seconds(one_gpu, 10_000) / 4
    )


def test_nothing_to_move_costs_nothing() -> None:
    assert transfer_seconds(ReplicaProfile(), 0) == 0.0


def test_negative_tokens_are_refused() -> None:
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        kv_bytes(ReplicaProfile(), -1)


@given(
    tokens=st.integers(min_value=1, max_value=2**21),
    more=st.integers(min_value=1, max_value=2**20),
)
def test_transfer_time_grows_with_the_prompt(tokens: int, more: int) -> None:
    profile = ReplicaProfile()
    assert profile.kv_transfer_setup_s <= transfer_seconds(profile, tokens)
    assert transfer_seconds(profile, tokens) < transfer_seconds(profile, tokens + more)


def test_a_faster_profile_moves_kv_faster() -> None:
    profile = ReplicaProfile()
    assert transfer_seconds(profile.scaled(time_factor=0.1), 4096) == pytest.approx(
        transfer_seconds(profile, 4096) * 0.1
    )


def _sglang_flag(flag: str) -> dict[str, Any]:
    for entry in json.loads(SERVER_ARGS.read_text())["arguments"]:
        if flag in entry["flags"]:
            return dict(entry)
    raise AssertionError(f"{flag} not in {SERVER_ARGS}")


def test_names_and_defaults_are_sglangs() -> None:
    mode = _sglang_flag("--disaggregation-mode")
    backend = _sglang_flag("--disaggregation-transfer-backend")
    port = _sglang_flag("--disaggregation-bootstrap-port")
    assert list(DISAGGREGATION_MODES) == mode["choices"]
    assert set(TRANSFER_BACKENDS) <= set(backend["choices"])
    assert backend["default"] == DEFAULT_TRANSFER_BACKEND
    assert port["default"] == DEFAULT_BOOTSTRAP_PORT


@pytest.mark.parametrize("name", ["mooncake", "nixl"])
def test_known_backends_parse(name: str) -> None:
    assert transfer_backend(name) == name


@pytest.mark.parametrize("name", ["fake", "MOONCAKE", ""], ids=["fake", "upper-case", "empty"])
def test_unknown_backends_are_named(name: str) -> None:
    with pytest.raises(ValueError, match="known: mooncake, nixl"):
        transfer_backend(name)


def test_unknown_mode_is_named() -> None:
    assert disaggregation_mode("decode") == "decode"
    with pytest.raises(ValueError, match="known: null, prefill, decode"):
        disaggregation_mode("both")
