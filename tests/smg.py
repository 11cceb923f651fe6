"""The real smg gateway in front of in-process emulated replicas, for the tests that need one.

`running_smg` starts `python -m smg launch` with the given workers and flags, waits until smg
reports them all healthy, and stops it at the end; `shared_prefix_round` sends a run of chat
requests behind one long system prompt and says where they went and what they hit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from radixfleet.emulator.testing import RunningEmulator
from radixfleet.localfleet.procs import free_ports

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class Gateway:
    """A started smg: where it serves and where it exposes its Prometheus metrics."""

    url: str
    metrics_url: str


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@contextmanager
def running_smg(
    worker_urls: Sequence[str],
    *,
    log: Path,
    policy: str = "cache_aware",
    extra: Sequence[str] = (),
    workers: int | None = None,
) -> Iterator[Gateway]:
    """smg routing to `worker_urls`, ready (every worker healthy) until the block ends.
    `workers` counts them when `extra` names them instead (PD mode's --prefill/--decode)."""
    port, metrics = free_ports(2)
    urls = ["--worker-urls", *worker_urls] if worker_urls else []
    command = [
        sys.executable, "-m", "smg", "launch",
        "--host", "127.0.0.1", "--port", str(port), *urls,
        "--policy", policy,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
        "--log-level", "warn", *extra,
    ]  # fmt: skip
    with log.open("wb") as sink:
        router = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        expected = len(worker_urls) if workers is None else workers
        _wait_ready(url, workers=expected, router=router, log=log)
        yield Gateway(url, f"http://127.0.0.1:{metrics}/metrics")
    finally:
        router.terminate()
        try:
            router.wait(timeout=15)
        except subprocess.TimeoutExpired:
            router.kill()
            router.wait()


def _wait_ready(url: str, *, workers: int, router: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert router.poll() is None, f"smg exited: {log.read_text()[-2000:]}"
        try:
            if get_json(f"{url}/readiness").get("healthy_workers") == workers:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"smg did not register its workers: {log.read_text()[-2000:]}")


def shared_prefix_round(
    url: str, replicas: Sequence[RunningEmulator], *, questions: int, pause_s: float = 0.0
) -> tuple[list[int], int]:
    """Send `questions` chats behind one long system prompt; the requests each replica served
    (sorted) and the prompt tokens served from cache, in all."""
    before = [r.emulator.model.stats(r.emulator.driver.now()).counters for r in replicas]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    system = "You answer questions about the radixfleet platform, kindly and briefly. " * 30
    for question in range(questions):
        client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": f"Question number {question}?"},
            ],
            max_tokens=2,
        )
        time.sleep(pause_s)
    after = [r.emulator.model.stats(r.emulator.driver.now()).counters for r in replicas]
    pairs = list(zip(after, before, strict=True))
    served = sorted(a.num_requests_total - b.num_requests_total for a, b in pairs)
    return served, sum(a.cached_tokens_total - b.cached_tokens_total for a, b in pairs)
