"""A local fleet's emulated replica with SGLang HiCache answers a prompt its GPU evicted from
its host tier, and says so.

One region: the region entry, the real smg router (gRPC, cache-aware) and one emulated replica
started as the fleet starts every replica (`python -m radixfleet.emulator`), with the model's
`sglang_args` (`--enable-hierarchical-cache --hicache-ratio 4`) and a GPU cache of 1024 tokens,
about one prompt. A prompt, another that evicts it from the GPU, then the first again: the
third answer's usage counts the prompt as cached, and the replica's /metrics put those tokens
under `cache_source="host"`. Without the flags the same sequence recomputes the prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec

pytestmark = pytest.mark.fleet

REGION, MODEL = "local", "chat"
PROMPT = "Alpha tells a long story about the first of many things. " * 40
OTHER = "Bravo has an entirely different tale to tell, word by word. " * 40


@pytest.fixture(scope="module", params=[True, False], ids=["hicache", "plain"])
def fleet(request: pytest.FixtureRequest, cache_dir: Path) -> Iterator[tuple[bool, LocalFleet]]:
    args = ["--enable-hierarchical-cache", "--hicache-ratio", "4"] if request.param else []
    model = ModelSpec(name=MODEL, profile_overrides={"kv_capacity_tokens": 1024}, sglang_args=args)
    spec = LocalFleetSpec(regions=[RegionSpec(name=REGION, models=[model])], cold_start_s=0.5)
    with LocalFleet(spec, cache_dir=cache_dir) as local:
        yield request.param, local


def _complete(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4}
    answer = requests.post(f"{url}/v1/completions", json=body, timeout=60)
    answer.raise_for_status()
    usage: dict[str, Any] = answer.json()["usage"]
    return usage


def test_a_prompt_evicted_from_the_gpu_is_answered_from_the_host_tier(
    fleet: tuple[bool, LocalFleet],
) -> None:
    tiered, local = fleet
    url = local.entry_url(REGION)
    _complete(url, PROMPT)
    _complete(url, OTHER)  # the GPU holds about one prompt: PROMPT is evicted from it
    usage = _complete(url, PROMPT)
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    sources = local.cache_sources()[f"{REGION}/{MODEL}"]
    if tiered:
        assert cached >= 0.9 * usage["prompt_tokens"], usage
        assert sources["host"] >= cached
    else:
        assert cached < 0.5 * usage["prompt_tokens"], usage
        assert "host" not in sources
