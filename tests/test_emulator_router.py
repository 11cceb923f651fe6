"""The SGLang gateway smg 1.13.0 (the PyPI binary) in front of emulated replicas: it registers
them, loads their tokenizer from /model_info's model_path, keeps them healthy, and routes OpenAI
and native requests, keeping a shared prefix on one replica (cache_aware)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack

import openai
import pytest

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import ReplicaProfile
from tests.smg import MODEL, get_json, running_smg, shared_prefix_round

pytestmark = pytest.mark.fleet
HEALTH_INTERVAL_S = 1


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[RunningEmulator]]]:
    tokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")
    profile = ReplicaProfile().scaled(time_factor=0.01)
    with ExitStack() as stack:
        replicas = [
            stack.enter_context(
                serve_in_thread(
                    EmulatorConfig(profile=profile, port=0, warm=True), tokenizer=tokenizer
                )
            )
            for _ in range(2)
        ]
        gateway = stack.enter_context(
            running_smg(
                [replica.url for replica in replicas],
                log=tmp_path_factory.mktemp("router") / "router.log",
                extra=["--health-check-interval-secs", str(HEALTH_INTERVAL_S)],
            )
        )
        yield gateway.url, replicas


def test_router_registers_emulators_with_their_metadata(
    fleet: tuple[str, list[RunningEmulator]],
) -> None:
    url, replicas = fleet
    workers = get_json(f"{url}/workers")["workers"]
    assert sorted(worker["url"] for worker in workers) == sorted(r.url for r in replicas)
    for worker in workers:
        assert worker["is_healthy"] is True
        assert worker["model_id"] == MODEL
        assert worker["labels"]["model_path"] == str(replicas[0].emulator.tokenizer.path)
        assert worker["models"][0]["tokenizer_path"] == str(replicas[0].emulator.tokenizer.path)


def test_chat_through_router_with_openai_client(fleet: tuple[str, list[RunningEmulator]]) -> None:
    url, _ = fleet
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    whole = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello router"}], max_tokens=6
    )
    assert whole.usage is not None and whole.usage.completion_tokens == 6
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hello router"}],
            max_tokens=6,
            stream=True,
        )
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content


def test_native_generate_through_router(fleet: tuple[str, list[RunningEmulator]]) -> None:
    url, _ = fleet
    body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 4}}).encode()
    request = urllib.request.Request(
        f"{url}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert len(answer["output_ids"]) == 4


def test_shared_prefix_stays_on_one_replica(fleet: tuple[str, list[RunningEmulator]]) -> None:
    url, replicas = fleet
    served, cached = shared_prefix_round(url, replicas, questions=6)
    assert served == [0, 6]
    assert cached > 5 * 400  # five of the six hit the long system prompt


def test_health_checks_keep_passing(fleet: tuple[str, list[RunningEmulator]]) -> None:
    url, replicas = fleet
    checks = [replica.emulator.health_checks for replica in replicas]
    time.sleep(HEALTH_INTERVAL_S * 2.5)
    assert all(r.emulator.health_checks > seen for r, seen in zip(replicas, checks, strict=True))
    assert all(worker["is_healthy"] for worker in get_json(f"{url}/workers")["workers"])
