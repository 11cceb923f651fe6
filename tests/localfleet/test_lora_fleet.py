"""A LoRA model on the local fleet: the real smg (1.13.0) routes its base's requests, emulated
replicas serve SGLang 0.5.23's adapter API, and the entry loads an adapter on demand where the
LoRA controller's `place()` says, then routes that adapter's requests to its holder.

What a replica holds is read from the replica itself (`GET /v1/models` lists each loaded adapter
with its base as `parent`, as SGLang's does), not from the entry's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from radixfleet.controllers.lora.localfleet import LocalFleetAdapterPlacer
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.spec import LoraAdapterSpec

pytestmark = pytest.mark.fleet

REGION, LORA, CHAT = "local", "lora-8b", "chat"
SUPPORT = {"Authorization": "Bearer sk-support"}
SEARCH = {"Authorization": "Bearer sk-search"}
ADAPTERS = [LoraAdapterSpec(name="support-tone", tenant="support"),
            LoraAdapterSpec(name="glossary")]  # fmt: skip


@pytest.fixture(scope="module")
def fleet(cache_dir: Path) -> Iterator[LocalFleet]:
    gate = TokenGate(ledger=TokenLedger({"support": None, "search": None}),
                     keys={"sk-support": "support", "sk-search": "search"})  # fmt: skip
    lora = ModelSpec(name=LORA, replicas=2, tenants=["support"], lora_adapters=ADAPTERS,
                     max_loaded_loras=2)  # fmt: skip
    chat = ModelSpec(name=CHAT, tenants=["search"])
    region = RegionSpec(name=REGION, models=[lora, chat], router_workers="http")
    spec = LocalFleetSpec(regions=[region], cold_start_s=0.5)
    with LocalFleet(spec, cache_dir=cache_dir, gates={REGION: gate},
                    adapter_placer=LocalFleetAdapterPlacer()) as local:  # fmt: skip
        yield local


def chat(fleet: LocalFleet, headers: dict[str, str], text: str, **fields: Any) -> requests.Response:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 4, **fields}
    return requests.post(f"{fleet.entry_url(REGION)}/v1/chat/completions", json=body,
                         headers=headers, timeout=60)  # fmt: skip


def held(fleet: LocalFleet) -> dict[str, set[str]]:
    """Each replica's adapters, as it lists them."""
    found = {}
    for replica in fleet.replicas(REGION, LORA):
        models = requests.get(f"{replica.url}/v1/models", timeout=10).json()["data"]
        found[replica.url] = {m["id"] for m in models if m.get("parent")}
    return found


def test_an_adapter_no_replica_holds_is_loaded_on_demand_and_its_requests_go_to_the_holder(
    fleet: LocalFleet,
) -> None:
    assert not any(held(fleet).values())  # nothing loaded at start
    first = chat(fleet, SUPPORT, "Hello there", model=f"{LORA}:support-tone")
    assert first.status_code == 200, first.text
    holders = [url for url, adapters in held(fleet).items() if "support-tone" in adapters]
    assert len(holders) == 1  # loaded on one replica, not both
    router = fleet.entry(REGION).adapters[LORA]
    for i in range(6):
        answer = chat(fleet, SUPPORT, f"Question {i} about my order", model=f"{LORA}:support-tone")
        assert answer.status_code == 200, answer.text
    assert router.stats.answered_by_holder == 7 and router.stats.refused == 0
    assert router.stats.on_demand_loads == 1
    base = chat(fleet, SUPPORT, "No adapter", model=LORA)  # the base, through smg
    assert base.status_code == 200, base.text


@pytest.mark.parametrize(
    ("headers", "fields"),
    [(SEARCH, {"model": f"{LORA}:support-tone"}),
     (SUPPORT, {"model": f"{LORA}:search-rerank"}),
     (SUPPORT, {"model": LORA, "lora_path": "search-rerank"})],
    ids=["search-names-supports-adapter", "support-names-an-adapter-it-lacks",
         "support-names-it-by-lora-path"],
)  # fmt: skip
def test_a_tenant_cannot_name_another_tenants_adapter_and_nothing_foreign_is_loaded(
    fleet: LocalFleet, headers: dict[str, str], fields: dict[str, str]
) -> None:
    answer = chat(fleet, headers, "Let me in", **fields)
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "model_not_found"
    mine = {a.name for a in ADAPTERS}
    assert all(adapters <= mine for adapters in held(fleet).values())
