"""The emulated replica runs SGLang HiCache as sglang 0.5.23 does: its flags build the host tier
(and a storage tier), a prompt the GPU evicted is answered from the host, and /metrics,
/generate and the OpenAI usage say so in SGLang's own names and shapes."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.hicache import DEFAULT_STORAGE_TOKENS, HiCacheConfig
from radixfleet.emulator.launch_server import LaunchError, config_from
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import ReplicaProfile, builtin_profile
from radixfleet.replica.tiers import WritePolicy
from tests.test_emulator_metrics import sglang_metrics

DEVICE_TOKENS = builtin_profile("h100-llama-3.1-8b").kv_capacity_tokens
BYTES_PER_TOKEN = builtin_profile("h100-llama-3.1-8b").kv_bytes_per_token
ENABLE = ["--model-path", "/m", "--enable-hierarchical-cache"]


def gb(size: int) -> int:
    """The tokens `size` GB of host memory hold (SGLang's gigabytes are 1e9 bytes)."""
    return size * 10**9 // BYTES_PER_TOKEN


@pytest.mark.parametrize(
    ("args", "tokens", "policy"),
    [
        ([], 2 * DEVICE_TOKENS, WritePolicy.WRITE_THROUGH),
        (["--hicache-ratio", "3.5"], int(3.5 * DEVICE_TOKENS), WritePolicy.WRITE_THROUGH),
        (["--hicache-size", "100"], gb(100), WritePolicy.WRITE_THROUGH),
        (["--hicache-size", "10", "--hicache-ratio", "9"], gb(10),
         WritePolicy.WRITE_THROUGH),
        (["--hicache-size", "10", "--tp-size", "2", "--pp-size", "2"], gb(40),
         WritePolicy.WRITE_THROUGH),
        (["--hicache-write-policy", "write_back"], 2 * DEVICE_TOKENS, WritePolicy.WRITE_BACK),
        (["--hicache-write-policy=write_through_selective"], 2 * DEVICE_TOKENS,
         WritePolicy.WRITE_THROUGH_SELECTIVE),
    ],
    ids=["default-ratio", "ratio", "size", "size-over-ratio", "size-per-rank", "write-back",
         "selective"],
)  # fmt: skip
def test_the_hicache_flags_size_the_host_tier(
    args: list[str], tokens: int, policy: WritePolicy
) -> None:
    config = config_from([*ENABLE, *args], {})
    assert config.hicache is not None
    tier = config.hicache.host_tier(config.profile)
    assert (tier.tokens, tier.write_policy) == (tokens, policy)
    assert config.hicache.storage_backend is None


@pytest.mark.parametrize(
    "args",
    [
        ["--hicache-ratio", "4"],
        ["--hicache-size", "64", "--hicache-write-policy", "write_back"],
        ["--hicache-storage-backend", "file"],
    ],
    ids=["ratio", "size-and-policy", "storage"],
)
def test_without_enable_the_hicache_flags_change_nothing(args: list[str]) -> None:
    assert config_from(["--model-path", "/m", *args], {}).hicache is None


def test_the_enable_flag_has_sglangs_short_spelling_too() -> None:
    assert config_from(["--model-path", "/m", "--enable-hicache"], {}).hicache is not None


@pytest.mark.parametrize(
    ("environ", "tokens"),
    [({}, DEFAULT_STORAGE_TOKENS), ({"RADIXFLEET_EMULATOR_STORAGE_TOKENS": "5000"}, 5000)],
    ids=["default", "from-env"],
)
def test_a_storage_backend_is_a_tier_of_the_process_sized_from_the_environment(
    environ: dict[str, str], tokens: int
) -> None:
    config = config_from([*ENABLE, "--hicache-storage-backend", "mooncake"], environ)
    assert config.hicache is not None
    assert (config.hicache.storage_backend, config.hicache.storage_tokens) == ("mooncake", tokens)
    assert config.hicache.storage_backend_class == "MooncakeStore"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hicache-ratio", "two"], "--hicache-ratio 'two': not a valid float"),
        (["--hicache-size", "1.5"], "--hicache-size '1.5': not a valid int"),
        (["--hicache-write-policy", "write_around"], "--hicache-write-policy 'write_around'"),
        (["--hicache-storage-backend", "s3"], "--hicache-storage-backend 's3': not one of"),
        (["--hicache-size"], "--hicache-size needs a value"),
    ],
    ids=["ratio-not-float", "size-not-int", "unknown-policy", "unknown-backend", "no-value"],
)
def test_a_bad_hicache_value_is_refused_as_sglangs_argparse_would(
    args: list[str], message: str
) -> None:
    with pytest.raises(LaunchError, match=message):
        config_from([*ENABLE, *args], {})


def test_a_bad_storage_size_in_the_environment_is_refused() -> None:
    with pytest.raises(LaunchError, match="RADIXFLEET_EMULATOR_STORAGE_TOKENS"):
        config_from(
            [*ENABLE, "--hicache-storage-backend", "file"],
            {"RADIXFLEET_EMULATOR_STORAGE_TOKENS": "-3"},
        )


# -- a served replica whose GPU holds about one prompt -------------------------------------------

PROMPT_A = "Alpha tells a long story about the first of many things. " * 40
PROMPT_B = "Bravo has an entirely different tale to tell, word by word. " * 40


def _replica(hicache: HiCacheConfig | None, tmp: Any) -> Iterator[RunningEmulator]:
    profile = ReplicaProfile().scaled(time_factor=0.001)
    profile = profile.model_copy(update={"kv_capacity_tokens": 1024})
    config = EmulatorConfig(profile=profile, port=0, warm=True, seed=1, hicache=hicache)
    tokenizer = load_tokenizer(tmp.getbasetemp() / "tokenizer-cache")
    with serve_in_thread(config, tokenizer=tokenizer) as running:
        yield running


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    yield from _replica(HiCacheConfig(ratio=4.0, storage_backend="file"), tmp_path_factory)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    yield from _replica(None, tmp_path_factory)


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _generate(replica: RunningEmulator, text: str) -> dict[str, Any]:
    body = {"text": text, "sampling_params": {"max_new_tokens": 4}}
    meta: dict[str, Any] = _post(f"{replica.url}/generate", body)["meta_info"]
    return meta


def _metrics(replica: RunningEmulator) -> dict[str, tuple[str, dict[str, float]]]:
    """name -> (type, {label value of cache_source/pool or '': value})."""
    with urllib.request.urlopen(f"{replica.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        values = {
            s.labels.get("cache_source", s.labels.get("pool", "")): s.value
            for s in family.samples
            if not s.name.endswith("_created")
        }
        out[name] = (family.type, values)
    return out


def _evict_a_then_ask_again(replica: RunningEmulator) -> dict[str, Any]:
    _generate(replica, PROMPT_A)
    _generate(replica, PROMPT_B)  # the GPU holds about one prompt: A is evicted from it
    return _generate(replica, PROMPT_A)


@pytest.fixture(scope="module")
def host_hit(tiered: RunningEmulator) -> dict[str, Any]:
    """The meta_info of prompt A asked again once the GPU evicted it, and the metrics around."""
    before = _metrics(tiered)
    meta = _evict_a_then_ask_again(tiered)
    return {"meta": meta, "before": before, "after": _metrics(tiered)}


def test_a_prompt_the_gpu_evicted_is_a_host_hit_in_generates_meta_info(
    host_hit: dict[str, Any],
) -> None:
    meta = host_hit["meta"]
    details = meta["cached_tokens_details"]
    assert details["host"] > 0
    assert details["device"] + details["host"] + details["storage"] == meta["cached_tokens"]
    assert details["storage_backend"] == "HiCacheFile"  # SGLang names the backend's class
    assert meta["cached_tokens"] >= 0.9 * meta["prompt_tokens"]


def test_without_hicache_the_details_say_device_alone(plain: RunningEmulator) -> None:
    meta = _evict_a_then_ask_again(plain)
    assert meta["cached_tokens"] < 0.5 * meta["prompt_tokens"]  # recomputed, no host tier
    again = _generate(plain, PROMPT_A)  # on the GPU now
    assert again["cached_tokens"] > 0
    assert again["cached_tokens_details"] == {"device": again["cached_tokens"], "host": 0}
    fresh = _generate(plain, "Zulu, a prompt nobody sent before, stands alone here.")
    assert fresh["cached_tokens"] == 0
    assert fresh["cached_tokens_details"] is None


def test_openai_usage_counts_the_host_hit_in_cached_tokens(tiered: RunningEmulator) -> None:
    prompt = "Charlie, a third long prompt for the completions route, goes on. " * 40
    other = "Delta pushes Charlie out of the GPU's small cache, token by token. " * 30
    for text in (prompt, other):
        _post(f"{tiered.url}/v1/completions", {"prompt": text, "max_tokens": 4})
    body = _post(f"{tiered.url}/v1/completions", {"prompt": prompt, "max_tokens": 4})
    usage = body["usage"]
    # SGLang's usage splits no hit by tier: the host's tokens count in cached_tokens.
    assert usage["prompt_tokens_details"] == {"cached_tokens": usage["prompt_tokens_details"][
        "cached_tokens"]}  # fmt: skip
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 0.9 * usage["prompt_tokens"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sglang:hicache_host_used_tokens", "gauge"),
        ("sglang:hicache_host_total_tokens", "gauge"),
        ("sglang:hicache_backup_tokens_total", "counter"),
        ("sglang:storage_prefetch_hit_tokens_total", "counter"),
        ("sglang:cached_tokens_total", "counter"),
    ],
    ids=["host-used", "host-total", "backup", "storage-prefetch-hit", "cached-tokens"],
)
def test_the_hicache_families_have_sglangs_names_and_types(
    host_hit: dict[str, Any], name: str, kind: str
) -> None:
    exported = host_hit["after"]
    assert exported[name][0] == kind
    assert sglang_metrics()[name] == kind


def test_a_host_hit_moves_cached_tokens_from_the_host_source(host_hit: dict[str, Any]) -> None:
    before = host_hit["before"]["sglang:cached_tokens_total"][1]
    after = host_hit["after"]["sglang:cached_tokens_total"][1]
    assert after["host"] - before.get("host", 0) >= host_hit["meta"]["cached_tokens_details"][
        "host"]  # fmt: skip
    assert host_hit["after"]["sglang:hicache_host_total_tokens"][1][""] == 4 * 1024
    assert host_hit["after"]["sglang:hicache_host_used_tokens"][1][""] > 0
    assert host_hit["after"]["sglang:hicache_backup_tokens_total"][1]["kv"] > 0


def test_without_hicache_no_hicache_family_is_exported(plain: RunningEmulator) -> None:
    exported = _metrics(plain)
    assert not [name for name in exported if "hicache" in name or "storage_prefetch" in name]
    assert set(exported["sglang:cached_tokens_total"][1]) == {"device"}
