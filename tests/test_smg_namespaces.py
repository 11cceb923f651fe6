"""LoRA adapters and cache salts through the real smg gateway (1.13.0) over HTTP workers.

smg passes a request's `lora_path` and `cache_salt` through to the worker, and its approximate
tree keeps namespaces apart: a prompt cached under one adapter or salt is not a tree match for
another, so smg picks by load instead of sending it to a replica whose cache cannot serve it.
Requests in one namespace still follow their prefix. (Over gRPC workers smg 1.13 does not pass
`lora_path` on to the worker: radixfleet/controllers/routers/README.md says why LoRA models route
over HTTP.)
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.localfleet.router import parse_decisions
from radixfleet.profile import ReplicaProfile
from tests.smg import MODEL, Gateway, running_smg

pytestmark = pytest.mark.fleet

SYSTEM = "You answer questions about invoices and refunds, kindly and briefly. " * 30


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Gateway, list[RunningEmulator]]]:
    tokenizer: EmulatorTokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tok")
    config = EmulatorConfig(
        profile=ReplicaProfile().scaled(time_factor=0.01), port=0, warm=True,
        lora_adapters=("billing", "support"),
    )  # fmt: skip
    with ExitStack() as stack:
        replicas = [stack.enter_context(serve_in_thread(config, tokenizer=tokenizer))
                    for _ in range(2)]  # fmt: skip
        log = tmp_path_factory.mktemp("smg") / "smg.log"
        urls = [replica.url for replica in replicas]
        yield stack.enter_context(running_smg(urls, log=log)), replicas


def chat(gateway: Gateway, question: str, **namespace: str) -> int:
    """One chat behind the shared system prompt; the prompt tokens it was served from cache."""
    body = {
        "model": MODEL, "max_tokens": 2, **namespace,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
    }  # fmt: skip
    request = urllib.request.Request(
        f"{gateway.url}/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        usage: dict[str, Any] = json.loads(answer.read())["usage"]
    return int(usage["prompt_tokens_details"]["cached_tokens"])


def decisions(gateway: Gateway) -> dict[str, float]:
    with urllib.request.urlopen(gateway.metrics_url, timeout=10) as response:
        return parse_decisions(response.read().decode())


@pytest.mark.parametrize(
    ("first", "other"),
    [({"lora_path": "billing"}, {"lora_path": "support"}),
     ({"cache_salt": "tenant-a"}, {"cache_salt": "tenant-b"}),
     ({"lora_path": "support", "cache_salt": "tenant-c"}, {})],
    ids=["adapters", "salts", "adapter-and-salt-then-base"],
)  # fmt: skip
def test_namespaces_stay_apart_in_the_gateway_and_in_the_caches(
    gateway: tuple[Gateway, list[RunningEmulator]], first: dict[str, str],
    other: dict[str, str], request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    smg, _ = gateway
    case = request.node.callspec.id
    assert chat(smg, f"{case} 0", **first) == 0
    before = decisions(smg)
    assert all(chat(smg, f"{case} {q}", **first) > 0 for q in (1, 2, 3))  # one namespace hits
    assert decisions(smg).get("tree_match", 0) - before.get("tree_match", 0) >= 2
    before = decisions(smg)
    assert chat(smg, f"{case} other", **other) == 0  # the same text in another namespace
    assert decisions(smg).get("tree_match", 0) == before.get("tree_match", 0), "not a match"
