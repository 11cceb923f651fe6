"""What smg 1.13.0's cache-aware routing makes of a prefix held on a replica's host tier.

Two emulated replicas with HiCache (`--enable-hierarchical-cache`) behind the real smg over
gRPC, each streaming its KV events: the GPU's pages with tier `DEVICE`, the host pool's with
tier `HOST` and medium `CPU_PINNED`, as sglang's HiRadixCache publishes them. A long prompt is
sent through smg (it lands on one replica, the holder), then the holder's GPU is filled with
other prompts sent to it directly, so the prompt's pages are evicted from the GPU (`removed`,
tier `DEVICE`) and kept on its host tier. The prompt is then sent through smg again: the test
records which branch smg's policy took (`event_hit`: its event-driven index matched a replica;
`event_miss`: it found no replica holding the prefix) and where the prompt went.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import openai
import pytest

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.hicache import HiCacheConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.localfleet.router import parse_decisions
from radixfleet.profile import ReplicaProfile
from radixfleet.replica.stats import CounterValues
from radixfleet.replica.tiers import WritePolicy
from tests.smg import MODEL, running_smg

pytestmark = pytest.mark.fleet

ROUNDS = 4
GPU_TOKENS = 1024  # about one long prompt: the fillers evict it


@dataclass(frozen=True)
class Round:
    """One prompt sent, evicted from its holder's GPU and sent again."""

    branch: str  # smg's decision for the second send
    back_to_holder: bool
    host_cached: int  # tokens the second send found on the holder's host tier


@contextmanager
def _replica(tokenizer: EmulatorTokenizer, policy: WritePolicy | None) -> Iterator[RunningEmulator]:
    profile = ReplicaProfile().scaled(time_factor=0.01)
    profile = profile.model_copy(update={"kv_capacity_tokens": GPU_TOKENS})
    hicache = None if policy is None else HiCacheConfig(ratio=16.0, write_policy=policy)
    config = EmulatorConfig(profile=profile, port=0, warm=True, grpc_port=0, hicache=hicache)
    with serve_in_thread(config, tokenizer=tokenizer) as running:
        yield running


@pytest.fixture(
    scope="module",
    params=[None, WritePolicy.WRITE_BACK, WritePolicy.WRITE_THROUGH],
    ids=["no-hicache", "write-back", "write-through"],
)
def rounds(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[bool, list[Round]]:
    """Whether the replicas have a host tier, and the rounds smg routed."""
    tokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")
    with ExitStack() as stack:
        replicas = [stack.enter_context(_replica(tokenizer, request.param)) for _ in range(2)]
        urls = [f"grpc://127.0.0.1:{r.emulator.grpc_port}" for r in replicas]
        warmup_off = ["--worker-warmup-secs", "0", "--worker-warmup-divert-every", "0"]
        log = tmp_path_factory.mktemp("smg") / "smg.log"
        gateway = stack.enter_context(running_smg(urls, log=log, extra=warmup_off))
        sent = [_round(gateway.url, gateway.metrics_url, replicas, i) for i in range(ROUNDS)]
        return request.param is not None, sent


def _round(url: str, metrics_url: str, replicas: list[RunningEmulator], index: int) -> Round:
    system = f"Round {index}: you answer questions about tiered caches, kindly. " * 30
    served = _send(url, replicas, system)
    holder = replicas[served]
    for filler in range(2):
        text = f"Filler {index}.{filler} pushes the prompt out of the small GPU cache. " * 40
        _post(f"{holder.url}/generate", text)
    time.sleep(0.5)  # the removals reach smg's index
    before_branches = _branches(metrics_url)
    before_host = _counters(holder).host_cached_tokens_total
    again = _send(url, replicas, system)
    branches = _branches(metrics_url)
    (branch,) = [b for b in branches if branches[b] > before_branches.get(b, 0)]
    return Round(branch, again == served, _counters(holder).host_cached_tokens_total - before_host)


def _send(url: str, replicas: list[RunningEmulator], system: str) -> int:
    """Send one chat through smg; the index of the replica that served it."""
    before = [_counters(r).num_requests_total for r in replicas]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi?"}],
        max_tokens=2,
    )
    time.sleep(0.3)  # its KV events reach smg before the next request
    after = [_counters(r).num_requests_total for r in replicas]
    (served,) = [i for i, (a, b) in enumerate(zip(after, before, strict=True)) if a > b]
    return served


def _counters(replica: RunningEmulator) -> CounterValues:
    return replica.emulator.model.stats(replica.emulator.driver.now()).counters


def _branches(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return parse_decisions(response.read().decode())


def _post(url: str, text: str) -> None:
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 1}}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()


def test_smg_credits_a_prefix_its_host_tier_events_say_a_replica_holds(
    rounds: tuple[bool, list[Round]],
) -> None:
    """smg 1.13.0 keeps a page that a `HOST` event stored when the GPU's `removed` (tier
    `DEVICE`) comes, in either order (write-through stores it on the host first, write-back
    after), and matches a prompt against it: `event_hit`, routed to the holder, whose host tier
    serves the prefix. Without a host tier the GPU's removal leaves smg nothing to match."""
    tiered, sent = rounds
    if tiered:
        assert [r.branch for r in sent] == ["event_hit"] * ROUNDS
        assert all(r.back_to_holder and r.host_cached > 0.9 * 700 for r in sent), sent
    else:
        assert [r.branch for r in sent] == ["event_miss"] * ROUNDS
        assert all(r.host_cached == 0 for r in sent)
