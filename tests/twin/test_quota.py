"""Token budgets in the twin: the quota's ledger shields well-behaved tenants from a burst.

A short run of benchmarks/quota_twin.py; only the direction is asserted (the numbers live in
the benchmark's results), with a margin wide enough for any seed of this scenario.
"""

from __future__ import annotations

from benchmarks.quota_twin import run, well_behaved_attainment
from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.controllers.quota.twin import TwinTokenGate
from radixfleet.twin.interfaces import AdmissionPolicy, UsageMeter


def test_enforcement_keeps_well_behaved_tenants_within_slo() -> None:
    result = run(replicas=1, quick=True)
    noisy = result["noisy_tenant"]
    with_, without = (result["per_tenant"][p] for p in ("enforced", "unenforced"))
    for key in ("slo_attainment", "ttft_attainment", "itl_attainment"):
        enforced = well_behaved_attainment(with_, noisy, key)
        assert enforced >= well_behaved_attainment(without, noisy, key) + 0.1, key
    assert with_[noisy]["throttled"] > 0
    assert without[noisy]["throttled"] == 0
    assert all(t["throttled"] == 0 for name, t in with_.items() if name != noisy)


def test_gate_charges_completion_and_refunds_a_failed_prompt() -> None:
    ledger = TokenLedger(budgets={"a": TokenBudget(tokens_per_minute=600)})  # 10/s, 50 held
    gate = TwinTokenGate(ledger, {"a": "m"})
    assert isinstance(gate, UsageMeter)
    policy: AdmissionPolicy = gate
    assert policy.admit("a", 30, 0.0)
    gate.admitted(1)
    gate.settle(1, 40, ok=True, now=0.0)  # 70 charged: 20 in debt
    assert ledger.balance("a", now=0.0) == -20
    assert not policy.admit("a", 30, 0.0)
    assert policy.admit("a", 30, 5.0)  # refilled to 30
    gate.admitted(2)
    gate.settle(2, 0, ok=False, now=5.0)  # failed before any token: the prompt comes back
    assert ledger.balance("a", now=5.0) == 30
    assert gate.throttled == {"a": 1}
