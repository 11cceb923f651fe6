"""Dynamic multi-LoRA on the emulated replica, over real HTTP: /load_lora_adapter and
/unload_lora_adapter with sglang 0.5.23's shapes and errors, the bounds and eviction, /v1/models,
the LoRA pool metrics, the flags of both command lines, and the batch cost of mixing adapters.

Timings are asserted only as lower bounds (the replica cannot answer before its model's time),
so a slow, shared machine cannot fail them.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from radixfleet.emulator.launch_server import LaunchError, config_from
from radixfleet.emulator.testing import RunningEmulator
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.replica import EvictionPolicy, LoraSpec
from tests.test_emulator_http import FAST, MODEL, post_json, serve

LOAD_S = 0.3  # a load's fixed time: long enough to see, short enough for a test
PROFILE = FAST.model_copy(update={"lora_load_overhead_s": LOAD_S})


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


@pytest.fixture
def replica(tokenizer: EmulatorTokenizer) -> Iterator[RunningEmulator]:
    lora = LoraSpec(max_loras_per_batch=2, max_loaded_loras=2)
    with serve(tokenizer, profile=PROFILE, lora=lora) as running:
        yield running


def load(replica: RunningEmulator, name: str, **fields: Any) -> tuple[int, Any]:
    body = {"lora_name": name, "lora_path": f"/adapters/{name}", **fields}
    return post_json(f"{replica.url}/load_lora_adapter", body)


def unload(replica: RunningEmulator, name: str) -> tuple[int, Any]:
    return post_json(f"{replica.url}/unload_lora_adapter", {"lora_name": name})


def listed(replica: RunningEmulator) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{replica.url}/v1/models", timeout=30) as response:
        return list(json.loads(response.read())["data"])


def complete(replica: RunningEmulator, adapter: str | None, **fields: Any) -> tuple[int, Any]:
    body = {"model": MODEL, "prompt": "Hello there", "max_tokens": 4, **fields}
    if adapter is not None:
        body["lora_path"] = adapter
    return post_json(f"{replica.url}/v1/completions", body)


# -- load and unload ----------------------------------------------------------------------------


def test_a_load_takes_its_time_answers_sglangs_shape_and_lists_the_adapter(
    replica: RunningEmulator,
) -> None:
    started = time.monotonic()
    status, body = load(replica, "billing")
    assert time.monotonic() - started >= LOAD_S * 0.9
    assert status == 200
    assert body == {
        "rid": None,
        "http_worker_ipc": None,
        "success": True,
        "error_message": "",
        "loaded_adapters": {"billing": "/adapters/billing"},
    }
    cards = listed(replica)
    assert cards[0]["id"] == MODEL
    assert {k: cards[1][k] for k in ("id", "root", "parent", "max_model_len")} == {
        "id": "billing",
        "root": "/adapters/billing",
        "parent": MODEL,
        "max_model_len": None,
    }


def test_a_freshly_loaded_adapter_answers_and_one_never_loaded_is_refused(
    replica: RunningEmulator,
) -> None:
    assert load(replica, "billing")[0] == 200
    status, answer = complete(replica, "billing")
    assert status == 200, answer
    assert complete(replica, None, model=f"{MODEL}:billing")[0] == 200
    status, answer = complete(replica, "marketing")
    assert status == 400
    assert answer["error"]["message"] == (
        "Got LoRA adapter that has never been loaded: marketing\n"
        "All loaded adapters: dict_keys(['billing'])."
    )


def test_an_unloaded_adapter_leaves_the_list_and_a_request_loads_it_again(
    replica: RunningEmulator,
) -> None:
    load(replica, "billing")
    status, body = unload(replica, "billing")
    assert (status, body["success"], body["loaded_adapters"]) == (200, True, {})
    assert [card["id"] for card in listed(replica)] == [MODEL]
    started = time.monotonic()
    assert complete(replica, "billing")[0] == 200  # SGLang reloads an adapter it once had
    assert time.monotonic() - started >= LOAD_S * 0.9
    assert [card["id"] for card in listed(replica)] == [MODEL, "billing"]


def test_an_unload_answers_once_the_adapters_requests_in_flight_have_finished(
    tokenizer: EmulatorTokenizer,
) -> None:
    step_s, tokens = 0.01, 100  # the request decodes for about a second
    profile = PROFILE.model_copy(update={"lora_decode_overhead_s": step_s})
    with serve(tokenizer, profile=profile, lora=LoraSpec()) as running:
        load(running, "billing")
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(complete, running, "billing", max_tokens=tokens, ignore_eos=True)
            while lora_gauges(running)["sglang:lora_pool_slots_used"] < 1:
                time.sleep(0.01)  # until the request runs
            started = time.monotonic()
            status, body = unload(running, "billing")
            waited = time.monotonic() - started
            assert answer.result()[0] == 200
    assert (status, body["success"]) == (200, True)
    assert waited >= 0.5 * step_s * tokens  # half its decode at least was still to come


def test_unloading_an_adapter_not_loaded_is_refused(replica: RunningEmulator) -> None:
    status, body = unload(replica, "ghost")
    assert status == 400 and body["success"] is False
    assert (
        body["error_message"] == "LoRA with name ghost does not exist. Loaded LoRAs: odict_keys([])"
    )


def test_loading_past_max_loaded_loras_unloads_the_least_recently_used(
    replica: RunningEmulator,
) -> None:
    load(replica, "a")
    load(replica, "b")
    assert complete(replica, "a")[0] == 200  # b is now the least recently used
    status, body = load(replica, "c")
    assert status == 200
    assert body["loaded_adapters"] == {"a": "/adapters/a", "c": "/adapters/c"}
    assert [card["id"] for card in listed(replica)] == [MODEL, "a", "c"]


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        pytest.param({}, {}, "because it is already loaded", id="already-loaded"),
        pytest.param(
            {"pinned": True}, {"pinned": True}, "not allowed to pin all slots", id="pin-all-slots"
        ),
    ],
)
def test_a_load_sglang_refuses_answers_400_with_its_reason(
    replica: RunningEmulator, first: dict[str, Any], second: dict[str, Any], message: str
) -> None:
    assert load(replica, "a", **first)[0] == 200
    status, body = load(replica, "a" if not second else "b", **second)
    assert status == 400 and body["success"] is False
    assert message in body["error_message"]
    assert body["loaded_adapters"] == {"a": "/adapters/a"}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param(
            {"lora_path": "/x"}, "Field 'lora_name' must be a non-empty string", id="no-name"
        ),
        pytest.param({"lora_name": "x", "lora_path": 3}, "Field 'lora_path'", id="path-not-text"),
        pytest.param(
            {"lora_name": "x", "lora_path": "/x", "pinned": "yes"}, "Field 'pinned'", id="pinned"
        ),
    ],
)
def test_a_malformed_load_says_which_field(
    replica: RunningEmulator, payload: dict[str, Any], message: str
) -> None:
    status, body = post_json(f"{replica.url}/load_lora_adapter", payload)
    assert status == 400
    assert message in body["error"]["message"]


def test_a_replica_without_lora_refuses_a_load(tokenizer: EmulatorTokenizer) -> None:
    with serve(tokenizer) as plain:
        status, body = load(plain, "a")
    assert status == 400
    assert (
        body["error_message"] == "LoRA is not enabled. Please set `--enable-lora` to enable LoRA."
    )
    assert body["loaded_adapters"] is None


def test_server_info_reports_the_lora_flags(replica: RunningEmulator) -> None:
    with urllib.request.urlopen(f"{replica.url}/server_info", timeout=30) as response:
        info = json.loads(response.read())
    assert (info["enable_lora"], info["max_loras_per_batch"], info["max_loaded_loras"]) == (
        True,
        2,
        2,
    )
    assert info["lora_eviction_policy"] == "lru"


# -- metrics ------------------------------------------------------------------------------------


def lora_gauges(replica: RunningEmulator) -> dict[str, float]:
    with urllib.request.urlopen(f"{replica.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("sglang:lora_pool")
    }


def test_the_lora_pool_gauges_are_sglangs_and_only_with_lora(
    replica: RunningEmulator, tokenizer: EmulatorTokenizer
) -> None:
    assert lora_gauges(replica) == {
        "sglang:lora_pool_slots_used": 0.0,
        "sglang:lora_pool_slots_total": 2.0,
        "sglang:lora_pool_utilization": 0.0,
    }
    with serve(tokenizer) as plain:
        assert lora_gauges(plain) == {}


# -- the command line ---------------------------------------------------------------------------


def test_sglangs_lora_flags_configure_the_replica() -> None:
    pinned = '{"lora_name": "p", "lora_path": "/p", "pinned": true}'
    config = config_from(
        ["--model-path", "m", "--enable-lora", "--lora-paths", "a=/a", pinned,
         "--max-loras-per-batch", "3", "--max-loaded-loras", "4",
         "--lora-eviction-policy", "fifo", "--max-lora-rank", "64"],
        {},
    )  # fmt: skip
    lora = config.lora_spec
    assert lora is not None
    assert (lora.max_loras_per_batch, lora.max_loaded_loras) == (3, 4)
    assert (lora.eviction_policy, lora.max_lora_rank) == (EvictionPolicy.FIFO, 64)
    assert [(a.name, a.path, a.pinned, a.rank) for a in lora.preloaded] == [
        ("a", "/a", False, 64),
        ("p", "/p", True, 64),
    ]


def test_no_lora_flag_means_no_lora() -> None:
    assert config_from(["--model-path", "m"], {}).lora_spec is None


def test_max_loaded_loras_below_the_batch_bound_exits_as_sglang_does() -> None:
    args = ["--model-path", "m", "--enable-lora", "--max-loras-per-batch", "4"]
    with pytest.raises(LaunchError, match="max_loaded_loras should be greater than or equal"):
        config_from([*args, "--max-loaded-loras", "2"], {})


# -- the batch cost of mixing adapters -----------------------------------------------------------

STEP_EXTRA_S = 0.005  # each distinct adapter past the first, per decode step
BASE_STEP_S = 0.010  # a decode step's own time
MIX = 4
TOKENS = 60


def batch_seconds(replica: RunningEmulator, adapters: list[str]) -> float:
    started = time.monotonic()
    with ThreadPoolExecutor(len(adapters)) as pool:
        answers = list(
            pool.map(lambda a: complete(replica, a, max_tokens=TOKENS, ignore_eos=True), adapters)
        )
    assert all(status == 200 for status, _ in answers), answers
    return time.monotonic() - started


def test_mixing_adapters_in_a_batch_is_slower_than_one_adapter(
    tokenizer: EmulatorTokenizer,
) -> None:
    # Decode steps of 10 ms, so that the answers overlap however late a busy machine starts
    # the client threads: at the fast profile's steps a first answer was done before the
    # others came (CI, cold, two cores shared), and its batch never mixed.
    profile = PROFILE.model_copy(update={
        "lora_load_overhead_s": 0.0, "lora_decode_per_adapter_s": STEP_EXTRA_S,
        "decode_overhead_s": BASE_STEP_S,
    })  # fmt: skip
    names = [f"a{i}" for i in range(MIX)]
    lora = LoraSpec(max_loras_per_batch=MIX + 1)
    with serve(tokenizer, profile=profile, lora=lora) as running:
        for name in names:
            assert load(running, name)[0] == 200
        one = batch_seconds(running, [names[0]] * MIX)  # the baseline, in the same run
        mixed = batch_seconds(running, names)
    # At least (MIX - 1) * STEP_EXTRA_S more per decode step for most of the answer's steps;
    # half of it leaves room for requests that join the batch a few steps apart.
    assert mixed - one >= 0.5 * (MIX - 1) * STEP_EXTRA_S * (TOKENS - 1)
