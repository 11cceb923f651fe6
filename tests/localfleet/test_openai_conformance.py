"""The official `openai` SDK against the local fleet's region entry (tests/openai_conformance.py):
one region, one model behind the real smg and an emulated replica, and the quota's token gate
holding one tenant's key, as `radixfleet demo` runs it with budgets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from tests.openai_conformance import CHECKS, Endpoint

pytestmark = pytest.mark.fleet

REGION, MODEL, TENANT, KEY = "local", "chat", "team-a", "sk-conformance"


@pytest.fixture(scope="module")
def endpoint(cache_dir: Path) -> Iterator[Endpoint]:
    budget = TokenBudget(tokens_per_minute=10_000_000)
    gate = TokenGate(ledger=TokenLedger({TENANT: budget}), keys={KEY: TENANT})
    spec = LocalFleetSpec(regions=[RegionSpec(name=REGION, models=[ModelSpec(name=MODEL)])],
                     cold_start_s=0.5)  # fmt: skip
    with LocalFleet(spec, cache_dir=cache_dir, gates={REGION: gate}) as local:
        yield Endpoint(f"{local.entry_url(REGION)}/v1", KEY, MODEL)


@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_the_openai_sdk_is_served_as_by_openai(
    endpoint: Endpoint, check: Callable[[Endpoint], None]
) -> None:
    check(endpoint)
