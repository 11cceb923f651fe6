"""The GPU-budget policy as pure functions: borrowing and admission properties, the quota
split, and the controller's decision on bad input (conditions, not exceptions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from radixfleet.config import Tenant
from radixfleet.config.catalog import GpuBudget
from radixfleet.controllers.quota.asks import Ask, BadAskError, ask_of
from radixfleet.controllers.quota.decide import (
    Observed,
    Quota,
    SetQuota,
    TenantObject,
    TenantView,
    accounts,
    admit,
    decide,
    split_quota,
)
from radixfleet.controllers.quota.state import ConditionType, Counted, TenantStatus

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GPU = "H100"
NAMES = ("a", "b", "c", "d")

budget_st = st.builds(GpuBudget, guaranteed=st.integers(0, 32), borrow=st.integers(0, 32))
budgets_st = st.dictionaries(st.sampled_from(NAMES), budget_st, min_size=1, max_size=4)


def view(
    name: str,
    budget: GpuBudget,
    *,
    committed: int,
    counted: dict[str, Counted] | None = None,
    all_budgets: dict[str, GpuBudget] | None = None,
    all_committed: dict[str, int] | None = None,
) -> TenantView:
    """The view the admission policy would read after the controller accounted everyone."""
    budgets = {t: {GPU: b} for t, b in (all_budgets or {name: budget}).items()}
    used = {t: {GPU: c} for t, c in (all_committed or {name: committed}).items()}
    account = accounts(budgets, used)[name][GPU]
    status = TenantStatus(namespaces=[f"ns-{name}"], gpus={GPU: account}, commitments=counted or {})
    return TenantView(name, [f"ns-{name}"], {GPU: budget}, status)


def ask(tenant: str, name: str, gpus: int, *, per_replica: int = 1) -> Ask:
    return Ask(f"ns-{tenant}", name, GPU, per_replica, gpus // per_replica)


# ---- borrowing and admission, as properties --------------------------------------------------


@st.composite
def admission_runs(draw: st.DrawFn) -> tuple[dict[str, GpuBudget], list[tuple[str, int]]]:
    budgets = draw(budgets_st)
    requests = draw(
        st.lists(st.tuples(st.sampled_from(sorted(budgets)), st.integers(1, 24)), max_size=30)
    )
    return budgets, requests


def run_admissions(
    budgets: dict[str, GpuBudget], requests: list[tuple[str, int]]
) -> list[tuple[dict[str, int], bool]]:
    """Sequential admissions, the controller accounting everyone between two of them; the
    commitments after each request and whether it was admitted."""
    committed = dict.fromkeys(budgets, 0)
    trace = []
    for i, (tenant, gpus) in enumerate(requests):
        seen = view(
            tenant,
            budgets[tenant],
            committed=committed[tenant],
            all_budgets=budgets,
            all_committed=committed,
        )
        allowed = admit(ask(tenant, f"m{i}", gpus), seen).allowed
        committed = {**committed, tenant: committed[tenant] + (gpus if allowed else 0)}
        trace.append((committed, allowed))
    return trace


@settings(max_examples=150, deadline=None)
@given(admission_runs())
def test_committed_never_exceeds_guaranteed_plus_borrow(run: tuple) -> None:
    budgets, requests = run
    for committed, _ in run_admissions(budgets, requests):
        for tenant, used in committed.items():
            assert used <= budgets[tenant].guaranteed + budgets[tenant].borrow


@settings(max_examples=150, deadline=None)
@given(admission_runs())
def test_a_borrowing_admission_never_takes_the_total_past_the_guarantees(run: tuple) -> None:
    # Borrowed GPUs come out of others' unused guarantees, so an admission that takes its
    # tenant past its own guarantee leaves the total within the pool. (Only a lender taking
    # back its guarantee, always admissible, can push the total past it: a reclaim.)
    budgets, requests = run
    pool = sum(b.guaranteed for b in budgets.values())
    before = 0
    for (tenant, _), (committed, allowed) in zip(
        requests, run_admissions(budgets, requests), strict=True
    ):
        if allowed and committed[tenant] > budgets[tenant].guaranteed:
            assert sum(committed.values()) <= max(pool, before)
        before = sum(committed.values())


@settings(max_examples=100, deadline=None)
@given(budgets_st, st.data())
def test_own_guarantee_is_always_admissible(
    budgets: dict[str, GpuBudget], data: st.DataObject
) -> None:
    # Whatever the others committed (even far past their budgets), a tenant gets its guarantee.
    tenant = data.draw(st.sampled_from(sorted(budgets)))
    committed = {t: data.draw(st.integers(0, 80)) for t in budgets}
    room = budgets[tenant].guaranteed - min(committed[tenant], budgets[tenant].guaranteed)
    assume(room >= 1)
    gpus = data.draw(st.integers(1, room))
    committed[tenant] = min(committed[tenant], budgets[tenant].guaranteed)
    seen = view(
        tenant,
        budgets[tenant],
        committed=committed[tenant],
        all_budgets=budgets,
        all_committed=committed,
    )
    assert admit(ask(tenant, "new", gpus), seen).allowed


@settings(max_examples=150, deadline=None)
@given(budgets_st, st.data())
def test_more_unused_elsewhere_never_lowers_a_ceiling(budgets: dict, data: st.DataObject) -> None:
    committed = {t: data.draw(st.integers(0, 40)) for t in budgets}
    tenant = data.draw(st.sampled_from(sorted(budgets)))
    before = accounts(
        {t: {GPU: b} for t, b in budgets.items()}, {t: {GPU: c} for t, c in committed.items()}
    )[tenant][GPU]
    lender = data.draw(st.sampled_from(sorted(budgets)))
    if lender != tenant:
        committed[lender] = max(0, committed[lender] - data.draw(st.integers(0, 40)))
    after = accounts(
        {t: {GPU: b} for t, b in budgets.items()}, {t: {GPU: c} for t, c in committed.items()}
    )[tenant][GPU]
    assert after.ceiling >= before.ceiling
    assert before.guaranteed <= before.ceiling <= before.guaranteed + before.borrow


@settings(max_examples=150, deadline=None)
@given(budget_st, st.integers(0, 80), st.integers(1, 16), st.integers(0, 16))
def test_a_change_that_commits_no_more_is_always_admitted(
    budget: GpuBudget, committed: int, was: int, shrink: int
) -> None:
    # A canary step or a scale-down must pass even when the tenant is over budget.
    counted = {"ns-a/m": Counted(gpu_type=GPU, gpus=was)}
    seen = view("a", budget, committed=committed + was, counted=counted)
    assert admit(ask("a", "m", max(1, was - shrink)), seen).allowed


# ---- admission, by example ---------------------------------------------------------------------


def test_denial_names_tenant_budget_committed_and_ask() -> None:
    seen = view(
        "search",
        GpuBudget(guaranteed=16, borrow=8),
        committed=12,
        all_budgets={
            "search": GpuBudget(guaranteed=16, borrow=8),
            "other": GpuBudget(guaranteed=8),
        },
        all_committed={"search": 12, "other": 6},
    )
    verdict = admit(Ask("ns-search", "llama", GPU, 4, 3), seen)
    assert not verdict.allowed
    assert verdict.message == (
        "tenant search: H100 budget exceeded: ns-search/llama asks for 12 GPUs "
        "(maxReplicas 3 x 4 GPUs), 12 are committed by its other InferenceServices, "
        "and the ceiling is 18 (16 guaranteed + 2 borrowable now of 8)"
    )


@pytest.mark.parametrize(
    ("the_ask", "why"),
    [
        pytest.param(
            Ask("ns-a", "m", None, 2, 1), "without the radixfleet.io/gpu-type", id="no-type"
        ),
        pytest.param(Ask("ns-a", "m", GPU, 2, None), "unbounded InferenceService", id="no-max"),
        pytest.param(Ask("ns-a", "m", "H200", 1, 1), "has no H200 budget", id="other-type"),
    ],
)
def test_denials_that_no_budget_could_admit(the_ask: Ask, why: str) -> None:
    verdict = admit(the_ask, view("a", GpuBudget(guaranteed=64), committed=0))
    assert not verdict.allowed and why in verdict.message and "tenant a" in verdict.message


def test_nothing_with_gpus_is_admitted_before_the_controller_accounts_the_tenant() -> None:
    fresh = TenantView("a", ["ns-a"], {GPU: GpuBudget(guaranteed=8)}, status=None)
    assert not admit(ask("a", "m", 1), fresh).allowed
    assert admit(Ask("ns-a", "cpu", None, 0, None), fresh).allowed  # no GPUs: nothing to check


def test_a_spec_shrunk_since_the_status_caps_the_ceiling() -> None:
    stale = view("a", GpuBudget(guaranteed=16), committed=0)
    shrunk = TenantView("a", ["ns-a"], {GPU: GpuBudget(guaranteed=4)}, stale.status)
    assert not admit(ask("a", "m", 8), shrunk).allowed


# ---- reading an InferenceService's ask --------------------------------------------------------


def isvc(annotations: dict[str, str], predictor: dict) -> dict:
    return {
        "metadata": {"name": "m", "namespace": "ns", "annotations": annotations},
        "spec": {"predictor": predictor},
    }


@pytest.mark.parametrize(
    ("annotations", "predictor", "per_replica", "max_replicas"),
    [
        ({"radixfleet.io/gpus-per-replica": "4"}, {"maxReplicas": 3}, 4, 3),
        ({}, {"maxReplicas": 2, "model": {"resources": {"limits": {"nvidia.com/gpu": "2"}}}}, 2, 2),
        # A hand-written manifest cannot ask for fewer GPUs than its pods take.
        (
            {"radixfleet.io/gpus-per-replica": "1"},
            {
                "maxReplicas": 1,
                "model": {"resources": {"requests": {"nvidia.com/gpu": 8}}},
                "workerSpec": {"pipelineParallelSize": 2},
            },
            16,
            1,
        ),
        ({}, {}, 0, None),
    ],
    ids=["annotation", "resources", "multinode-beats-annotation", "cpu-only"],
)
def test_ask_of(
    annotations: dict, predictor: dict, per_replica: int, max_replicas: int | None
) -> None:
    found = ask_of(isvc(annotations, predictor))
    assert (found.gpus_per_replica, found.max_replicas) == (per_replica, max_replicas)


@pytest.mark.parametrize("value", ["four", "2.5", True])
def test_a_non_integer_gpu_count_is_unreadable(value: object) -> None:
    with pytest.raises(BadAskError):
        ask_of(isvc({"radixfleet.io/gpus-per-replica": value}, {"maxReplicas": 1}))  # type: ignore[dict-item]


# ---- the ResourceQuota split -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 200),
    st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4"]), st.integers(0, 100), min_size=1),
)
def test_quota_shares_add_up_and_never_starve_what_fits(total: int, committed: dict) -> None:
    shares = split_quota(total, committed)
    assert sum(shares.values()) == total and min(shares.values()) >= 0
    if sum(committed.values()) <= total:
        assert all(shares[ns] >= committed[ns] for ns in committed)


# ---- the controller's decision on bad input ------------------------------------------------------


def tenant_obj(
    name: str,
    namespaces: list[str],
    *,
    created: str = "2026-01-01T00:00:00Z",
    budget: dict | None = None,
    status: TenantStatus | None = None,
) -> TenantObject:
    tenant = Tenant(
        name=name,
        namespaces=namespaces,
        gpu_budget=budget if budget is not None else {GPU: GpuBudget(guaranteed=8)},
    )
    return TenantObject(name=name, created=created, generation=1, tenant=tenant, status=status)


def condition(status: TenantStatus, kind: ConditionType) -> tuple[str, str, str]:
    found = status.condition(kind)
    assert found is not None
    return found.status, found.reason, found.message


def test_a_namespace_claimed_twice_stays_with_the_older_tenant() -> None:
    older = tenant_obj("old", ["shared", "o"], created="2026-01-01T00:00:00Z")
    newer = tenant_obj("new", ["shared", "n"], created="2026-02-01T00:00:00Z")
    plan = decide(Observed(tenants=[newer, older], asks=[Ask("shared", "m", GPU, 1, 4)]), T0)
    assert plan.statuses["old"].namespaces == ["o", "shared"]
    assert plan.statuses["new"].namespaces == ["n"]
    assert plan.statuses["old"].gpus[GPU].committed == 4
    assert condition(plan.statuses["new"], ConditionType.NAMESPACES_CLAIMED) == (
        "False",
        "NamespaceClaimedByAnotherTenant",
        "not governed by this tenant: shared (claimed by tenant old)",
    )
    assert condition(plan.statuses["new"], ConditionType.READY)[:2] == (
        "False",
        "NamespaceClaimedByAnotherTenant",
    )


def test_unknown_gpu_types_and_missing_secrets_are_conditions() -> None:
    obj = tenant_obj("a", ["ns-a"], budget={"B300": GpuBudget(guaranteed=8)})
    plan = decide(Observed(tenants=[obj], missing_secrets={"a": ["keys/a[api-key]"]}), T0)
    status = plan.statuses["a"]
    assert status.gpus == {}  # the unknown type's budget is ignored, not admitted against
    kind, reason, message = condition(status, ConditionType.GPU_TYPES_KNOWN)
    assert (kind, reason) == ("False", "UnknownGpuType") and "B300" in message
    assert condition(status, ConditionType.API_KEYS_RESOLVED) == (
        "False",
        "SecretMissing",
        "API key Secrets not found: keys/a[api-key] (radixfleet reads only the Secrets its "
        "Role in the namespace names: render the tenant with its keys)",
    )


@pytest.mark.parametrize(
    ("expiries", "live", "reason"),
    [
        pytest.param([None, T0 + timedelta(days=1)], 2, "Resolved", id="both-live"),
        pytest.param([T0 - timedelta(hours=1), None], 1, "Resolved", id="rotated-old-expired"),
        pytest.param([T0 - timedelta(hours=2), T0], 0, "AllKeysExpired", id="all-expired"),
    ],
)
def test_the_status_counts_only_the_keys_the_entries_accept_now(
    expiries: list[datetime | None], live: int, reason: str
) -> None:
    obj = tenant_obj("a", ["ns-a"], budget={})
    status = decide(Observed(tenants=[obj], api_keys={"a": expiries}), T0).statuses["a"]
    assert status.api_keys == live
    kind, found, message = condition(status, ConditionType.API_KEYS_RESOLVED)
    assert (kind, found) == ("True" if live else "False", reason)
    if not live:  # the last expiry is named, so the team knows since when its clients fail
        assert T0.isoformat() in message
        assert condition(status, ConditionType.READY)[:2] == ("False", "AllKeysExpired")


def test_an_unparseable_spec_is_kept_and_reported() -> None:
    broken = TenantObject(name="x", created="", spec_error="spec.namespaces: too short")
    plan = decide(Observed(tenants=[broken]), T0)
    assert condition(plan.statuses["x"], ConditionType.READY) == (
        "False",
        "InvalidSpec",
        "spec.namespaces: too short",
    )


def test_a_reclaimed_loan_reports_the_borrower_over_budget_and_shrinks_its_quota() -> None:
    lender = tenant_obj("lender", ["l"], budget={GPU: GpuBudget(guaranteed=8)})
    borrower = tenant_obj("borrower", ["b"], budget={GPU: GpuBudget(guaranteed=2, borrow=8)})
    asks = [Ask("b", "m", GPU, 1, 8), Ask("l", "m", GPU, 1, 8)]  # the lender took all it had
    plan = decide(Observed(tenants=[lender, borrower], asks=asks), T0)
    status = plan.statuses["borrower"]
    assert status.gpus[GPU].ceiling == 2
    assert condition(status, ConditionType.WITHIN_BUDGET)[:2] == ("False", "OverCommitted")
    assert SetQuota("b", "borrower", 2) in plan.quotas


def test_a_second_pass_changes_nothing_and_keeps_transition_times() -> None:
    objs = [tenant_obj("a", ["ns-a"])]
    first = decide(Observed(tenants=objs, quotas={"ns-a": Quota()}), T0)
    settled = [TenantObject(**{**o.__dict__, "status": first.statuses[o.name]}) for o in objs]
    again = decide(
        Observed(tenants=settled, quotas={"ns-a": Quota(hard=8)}), T0 + timedelta(minutes=5)
    )
    assert again.statuses == {} and again.quotas == []
    assert first.quotas == [SetQuota("ns-a", "a", 8)]
