"""The SGLang gateway smg 1.13.0 (the PyPI binary) in front of emulated replicas: it registers
them, loads their tokenizer from /model_info's model_path, keeps them healthy, and routes OpenAI
and native requests, keeping a shared prefix on one replica (cache_aware)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import openai
import pytest

from radixfleet.emulator.server import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import ReplicaProfile

pytestmark = pytest.mark.fleet
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
HEALTH_INTERVAL_S = 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_ready(url: str, *, workers: int, router: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert router.poll() is None, "smg exited"
        try:
            if get_json(f"{url}/readiness").get("healthy_workers") == workers:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("smg did not become ready")


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[RunningEmulator]]]:
    tokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")
    profile = ReplicaProfile().scaled(time_factor=0.01)
    port = free_port()
    with ExitStack() as stack:
        replicas = [
            stack.enter_context(
                serve_in_thread(
                    EmulatorConfig(profile=profile, port=0, warm=True), tokenizer=tokenizer
                )
            )
            for _ in range(2)
        ]
        command = [
            sys.executable, "-m", "smg", "launch",
            "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *(replica.url for replica in replicas),
            "--policy", "cache_aware",
            "--health-check-interval-secs", str(HEALTH_INTERVAL_S),
            "--log-level", "warn",
        ]  # fmt: skip
        log = tmp_path_factory.mktemp("router") / "router.log"
        with log.open("wb") as sink:
            router = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, workers=2, router=router)
            yield url, replicas
        finally:
            router.terminate()
            try:
                router.wait(timeout=15)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait()


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
    before = [r.emulator.model.stats(r.emulator.driver.now()).counters for r in replicas]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    system = "You are a careful assistant for the radixfleet platform team. " * 30
    for question in range(6):
        client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": f"Question number {question}?"},
            ],
            max_tokens=2,
        )
    after = [r.emulator.model.stats(r.emulator.driver.now()).counters for r in replicas]
    served = sorted(
        a.num_requests_total - b.num_requests_total for a, b in zip(after, before, strict=True)
    )
    cached = sum(
        a.cached_tokens_total - b.cached_tokens_total for a, b in zip(after, before, strict=True)
    )
    assert served == [0, 6]
    assert cached > 5 * 400  # five of the six hit the long system prompt


def test_health_checks_keep_passing(fleet: tuple[str, list[RunningEmulator]]) -> None:
    url, replicas = fleet
    checks = [replica.emulator.health_checks for replica in replicas]
    time.sleep(HEALTH_INTERVAL_S * 2.5)
    assert all(r.emulator.health_checks > seen for r, seen in zip(replicas, checks, strict=True))
    assert all(worker["is_healthy"] for worker in get_json(f"{url}/workers")["workers"])
