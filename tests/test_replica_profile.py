"""Tests of the replica profile: CALIBRATION.md's numbers and the YAML loader's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixfleet.profile import (
    BUILTIN_PROFILES,
    ProfileError,
    ReplicaProfile,
    load_profile,
    resolve_profile,
)


@pytest.mark.parametrize(
    ("batch", "expected_ms"),
    [(1, 6.6), (8, 7.5), (32, 10.5), (64, 14.5), (128, 22.5), (200, 31.0)],
    ids=lambda value: str(value),
)
def test_decode_step_matches_calibration_examples(batch: int, expected_ms: float) -> None:
    step = ReplicaProfile().decode_step_seconds(batch=batch, context_tokens=2000 * batch)
    assert step * 1000 == pytest.approx(expected_ms, abs=0.35)


def test_prefill_matches_measured_points() -> None:
    profile = ReplicaProfile()
    assert 8192 / profile.prefill_seconds(8192, 0) == pytest.approx(27_700, rel=0.03)
    assert profile.prefill_seconds(2000, 0) < 0.086
    assert profile.prefill_seconds(230, 0) == pytest.approx(0.027, abs=0.006)


def test_cached_prefix_makes_prefill_cheaper_than_full() -> None:
    profile = ReplicaProfile()
    assert profile.prefill_seconds(100, 4000) < profile.prefill_seconds(4100, 0)
    assert profile.prefill_seconds(0, 4000) == 0.0


def test_builtin_profiles_are_named_by_their_key() -> None:
    assert {"h100-llama-3.1-8b", "h200-llama-3.1-8b", "4xh100-llama-3.1-70b"} <= set(
        BUILTIN_PROFILES
    )
    for name, profile in BUILTIN_PROFILES.items():
        assert profile.name == name


def test_cold_start_is_within_calibrated_range() -> None:
    assert 45 <= ReplicaProfile().cold_start_seconds <= 90


def test_load_profile_from_base(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("base: h200-llama-3.1-8b\nname: mine\nmax_running_requests: 64\n")
    profile = load_profile(path)
    assert (profile.name, profile.kv_capacity_tokens, profile.max_running_requests) == (
        "mine",
        920_000,
        64,
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kv_capacity_tokens: -1\n", "kv_capacity_tokens"),
        ("no_such_field: 1\n", "no_such_field"),
        ("base: nope\n", "base"),
        ("- 1\n- 2\n", "mapping"),
        ("a: [\n", "YAML"),
    ],
    ids=["negative-capacity", "unknown-field", "unknown-base", "not-a-mapping", "bad-yaml"],
)
def test_load_profile_errors_name_file_and_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_resolve_profile_accepts_names_paths_and_none(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: x\n")
    assert resolve_profile(None).name == "h100-llama-3.1-8b"
    assert resolve_profile("h200-llama-3.1-8b").kv_capacity_tokens == 920_000
    assert resolve_profile(path).name == "x"
    with pytest.raises(ProfileError, match="cannot read"):
        resolve_profile(tmp_path / "missing.yaml")


def test_scaled_profile_shrinks_every_duration() -> None:
    fast = ReplicaProfile().scaled(time_factor=0.01)
    assert fast.prefill_seconds(1000, 0) == pytest.approx(
        ReplicaProfile().prefill_seconds(1000, 0) * 0.01
    )
    assert fast.cold_start_seconds == pytest.approx(0.6)
