"""The SGLang side of the local fleet for the dashboard tests: emulated replicas with traffic.

Each replica is the project's emulated SGLang replica (`radixfleet emulate`, served in-process),
placed in a region and namespace by the scrape's target labels, as a PodMonitor places real
pods. A background client keeps requests flowing, with a shared prefix so the prefix cache hits,
so that rates, quantiles and ratios over SGLang's counters and histograms have values.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import builtin_profile

SYSTEM_PROMPT = "You are the support assistant of a company that sells tea. Be brief. " * 12


@dataclass(frozen=True)
class Placement:
    """Where a replica runs and what it serves."""

    region: str
    namespace: str
    model: str
    profile: str


PLACEMENTS = (
    Placement("us-east-1", "team-search", "llama-3-1-8b", "h100-llama-3.1-8b"),
    Placement("us-east-1", "team-search", "llama-3-1-8b", "h100-llama-3.1-8b"),
    Placement("eu-west-1", "team-support", "llama-3-1-8b", "h100-llama-3.1-8b"),
    Placement("eu-west-1", "team-search", "llama-3-1-70b", "4xh100-llama-3.1-70b"),
)


@dataclass(frozen=True)
class ReplicaTarget:
    """A running replica as Prometheus scrapes it: address and target labels."""

    address: str
    labels: dict[str, str]


@contextmanager
def emulated_fleet(cache_dir: Path) -> Iterator[list[ReplicaTarget]]:
    """Serve every placement, keep traffic on them while the block runs."""
    tokenizer = load_tokenizer(cache_dir)
    with ExitStack() as stack:
        targets, urls = [], []
        for i, place in enumerate(PLACEMENTS):
            config = EmulatorConfig(
                profile=builtin_profile(place.profile),
                served_model_name=place.model,
                port=0,
                warm=True,
                seed=i,
            )
            replica = stack.enter_context(serve_in_thread(config, tokenizer=tokenizer))
            urls.append(replica.url)
            labels = {
                "region": place.region,
                "namespace": place.namespace,
                "revision": f"{place.model}-predictor-00001",
            }
            targets.append(ReplicaTarget(f"127.0.0.1:{replica.port}", labels))
        stop = threading.Event()
        client = threading.Thread(target=_traffic, args=(urls, stop), daemon=True)
        client.start()
        try:
            yield targets
        finally:
            stop.set()
            client.join(timeout=30)


def _traffic(urls: list[str], stop: threading.Event) -> None:
    turn = 0
    while not stop.is_set():
        for url in urls:
            body = {"prompt": f"{SYSTEM_PROMPT}Question {turn}: which tea?", "max_tokens": 12}
            request = urllib.request.Request(
                f"{url}/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                answer.read()
        turn += 1
        stop.wait(0.1)
