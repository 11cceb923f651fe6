"""The emulated replica's P/D roles (`--disaggregation-mode prefill|decode`), served for real:
a decode replica answers after its prefill peer's room is published, waits the KV transfer,
exports SGLang's disaggregation families, and never hangs on a room that does not come."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from radixfleet.emulator.bootstrap import DisaggConfig, disagg_config
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.launch_server import LaunchError, config_from
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.profile import ReplicaProfile
from radixfleet.replica.disagg import transfer_seconds
from tests.test_emulator_metrics import sglang_metrics

# A slow link (1 GB/s, 50 ms setup) makes the transfer of a 2,000-token prompt about 0.31 s:
# long beside the scaled prefill and decode, so the decode's time shows it.
PROFILE = ReplicaProfile(kv_transfer_gb_s=1.0, kv_transfer_setup_s=0.05).scaled(time_factor=0.1)
PROMPT = " ".join(f"word{i}" for i in range(2000))


@dataclass(frozen=True)
class Pair:
    prefill: RunningEmulator
    decode: RunningEmulator
    bootstrap_port: int
    impatient: RunningEmulator  # a decode that waits 1 s for a room, for the failures


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


@pytest.fixture(scope="module")
def pair(tokenizer: EmulatorTokenizer) -> Iterator[Pair]:
    prefill_config = EmulatorConfig(
        profile=PROFILE, port=0, warm=True, disaggregation=DisaggConfig("prefill", 0)
    )
    decode_config, impatient_config = (
        EmulatorConfig(
            profile=PROFILE, port=0, warm=True,
            disaggregation=DisaggConfig("decode", room_timeout_s=timeout),
        )
        for timeout in (60.0, 1.0)
    )  # fmt: skip
    with (
        serve_in_thread(prefill_config, tokenizer=tokenizer) as prefill,
        serve_in_thread(decode_config, tokenizer=tokenizer) as decode,
        serve_in_thread(impatient_config, tokenizer=tokenizer) as impatient,
    ):
        assert prefill.emulator.role is not None and prefill.emulator.role.bootstrap is not None
        yield Pair(prefill, decode, prefill.emulator.role.bootstrap.port, impatient)


def post(url: str, body: dict[str, Any], *, timeout: float = 30) -> tuple[int, Any]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _body(room: int, port: int, **extra: Any) -> dict[str, Any]:
    return {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": 8, "ignore_eos": True},
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": port,
        "bootstrap_room": room,
        **extra,
    }


def test_decode_answers_after_its_prefill_room_and_the_transfer(pair: Pair) -> None:
    room = random.getrandbits(63)
    body = _body(room, pair.bootstrap_port)
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        decoded = pool.submit(post, f"{pair.decode.url}/generate", body)
        time.sleep(0.2)  # the decode waits for the room meanwhile: nothing is ready yet
        assert not decoded.done()
        prefilled = pool.submit(post, f"{pair.prefill.url}/generate", body)
        (p_status, p_answer), (d_status, d_answer) = prefilled.result(), decoded.result()
        elapsed = time.monotonic() - started
    assert (p_status, d_status) == (200, 200)
    assert p_answer["meta_info"]["completion_tokens"] == 1  # the prefill role's one token
    assert d_answer["meta_info"]["completion_tokens"] == 8
    prompt_tokens = d_answer["meta_info"]["prompt_tokens"]
    assert elapsed >= 0.2 + transfer_seconds(PROFILE, prompt_tokens)


def test_both_roles_metrics_move(pair: Pair) -> None:
    room = random.getrandbits(63)
    body = _body(room, pair.bootstrap_port)
    before_p, before_d = _scrape(pair.prefill), _scrape(pair.decode)
    with ThreadPoolExecutor(2) as pool:
        decoded = pool.submit(post, f"{pair.decode.url}/generate", body)
        prefilled = pool.submit(post, f"{pair.prefill.url}/generate", body)
        assert prefilled.result()[0] == decoded.result()[0] == 200
    after_p, after_d = _scrape(pair.prefill), _scrape(pair.decode)
    grew = after_p["sglang:kv_transfer_total_mb_sum"] - before_p["sglang:kv_transfer_total_mb_sum"]
    tokens = decoded.result()[1]["meta_info"]["prompt_tokens"]
    assert grew == pytest.approx(tokens * PROFILE.kv_bytes_per_token / 1e6)
    assert (
        after_p["sglang:prompt_tokens_histogram_count"]
        == before_p["sglang:prompt_tokens_histogram_count"] + 1
    )
    # The decode's time to first token holds the transfer (and the wait for the prefill).
    ttft = (
        after_d["sglang:time_to_first_token_seconds_sum"]
        - before_d["sglang:time_to_first_token_seconds_sum"]
    )
    assert ttft >= transfer_seconds(PROFILE, tokens)
    assert 'engine_type="decode"' in _text(pair.decode)
    assert "sglang:num_decode_prealloc_queue_reqs" in after_d
    assert "sglang:num_prefill_bootstrap_queue_reqs" in after_p


def test_a_room_that_never_comes_fails_with_sglangs_error(pair: Pair) -> None:
    failed = _scrape(pair.impatient)["sglang:num_transfer_failed_reqs_total"]
    started = time.monotonic()
    status, answer = post(f"{pair.impatient.url}/generate", _body(12345, pair.bootstrap_port))
    assert status == 500
    assert "Decode transfer failed" in answer["error"]["message"]
    assert "bootstrap_room=12345" in answer["error"]["message"]
    assert time.monotonic() - started < 20  # the 1 s room timeout, with a wide margin
    assert _scrape(pair.impatient)["sglang:num_transfer_failed_reqs_total"] == failed + 1


def test_an_unreachable_prefill_fails_the_request(pair: Pair, unused_port: int) -> None:
    status, answer = post(f"{pair.impatient.url}/generate", _body(7, unused_port))
    assert status == 500
    assert "Decode transfer failed" in answer["error"]["message"]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_request_without_a_room_gets_sglangs_400(pair: Pair, role: str) -> None:
    replica = pair.prefill if role == "prefill" else pair.decode
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}
    status, answer = post(f"{replica.url}/generate", body)
    assert status == 400
    assert "without bootstrap room id" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("bootstrap_room", -1),
        ("bootstrap_room", "x"),
        ("bootstrap_port", 0),
        ("bootstrap_host", ""),
    ],
    ids=["negative-room", "text-room", "port-zero", "empty-host"],
)
def test_bad_bootstrap_fields_are_named(pair: Pair, field: str, value: object) -> None:
    body = {**_body(1, pair.bootstrap_port), field: value}
    status, answer = post(f"{pair.prefill.url}/generate", body)
    assert status == 400
    assert field in answer["error"]["message"]


def test_launch_server_takes_sglangs_disaggregation_flags() -> None:
    args = [
        "--model-path", "m", "--disaggregation-mode", "prefill",
        "--disaggregation-bootstrap-port", "18998",
        "--disaggregation-transfer-backend", "nixl",
    ]  # fmt: skip
    config = config_from(args, {})
    assert config.disaggregation == DisaggConfig("prefill", 18998, "nixl")
    assert config.engine_type == "prefill"
    assert config_from(["--model-path", "m"], {}).disaggregation is None


def test_launch_server_refuses_a_backend_it_does_not_model() -> None:
    with pytest.raises(LaunchError, match="known: mooncake, nixl"):
        config_from(["--model-path", "m", "--disaggregation-mode", "decode",
                     "--disaggregation-transfer-backend", "ascend"], {})  # fmt: skip


def test_null_mode_is_no_role() -> None:
    assert disagg_config(mode="null", bootstrap_port=None, transfer_backend=None) is None


def _text(replica: RunningEmulator) -> str:
    with urllib.request.urlopen(f"{replica.url}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _scrape(replica: RunningEmulator) -> dict[str, float]:
    """Each unbucketed sample by name (every family here has one series)."""
    samples: dict[str, float] = {}
    for line in _text(replica).splitlines():
        if line.startswith("#") or not line or "le=" in line:
            continue
        name, _, value = line.rpartition(" ")
        samples[name.split("{")[0]] = float(value)
    return samples


@pytest.fixture
def unused_port() -> int:
    from radixfleet.localfleet.procs import free_ports

    return free_ports(1)[0]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_roles_families_are_sglangs_with_their_types(pair: Pair, role: str) -> None:
    replica = pair.prefill if role == "prefill" else pair.decode
    reference = sglang_metrics()
    ours = {}
    for family in text_string_to_metric_families(_text(replica)):
        name = family.name + "_total" if family.type == "counter" else family.name
        ours[name] = family.type
    wrong = {name: kind for name, kind in ours.items() if reference.get(name) != kind}
    assert not wrong, f"not sglang 0.5.23's: {wrong}"
    own = {
        "prefill": {"sglang:num_prefill_inflight_queue_reqs", "sglang:kv_transfer_latency_ms"},
        "decode": {"sglang:num_decode_transfer_queue_reqs"},
    }[role]
    assert own <= set(ours)
