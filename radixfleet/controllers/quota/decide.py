"""The whole GPU-budget policy, as pure functions: borrowing, admission, quota split, status.

No I/O, no clock (`now` is an argument), no client library: the controller, the admission
policy's tests, the local fleet and the twin call the same functions.

Borrowing, per GPU type. A tenant may commit its `guaranteed` GPUs at any time, whatever the
others do. On top of that it may borrow up to `borrow` GPUs out of what the other tenants leave
unused of their own guarantees, less what the others already borrow:

    borrowable(T) = min(borrow(T), max(0, sum over U != T of unused(U) - over(U)))

where unused(U) = max(0, guaranteed(U) - committed(U)) and over(U) = max(0, committed(U) -
guaranteed(U)). T's own commitments do not move its ceiling (`guaranteed + borrowable`), so the
admission policy can check each InferenceService against one number per GPU type. A borrow
never takes the total past the sum of guarantees; only a lender taking back its guarantee can,
and then the borrower is reported over budget and its ResourceQuota shrinks: running pods are
never evicted, new ones wait.

Admission (`admit`) is what the ValidatingAdmissionPolicy in `admission.py` evaluates in CEL
against a Tenant's status; this module is the reference, and a test keeps the two equal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from radixfleet.config import Tenant
from radixfleet.config.catalog import GpuBudget
from radixfleet.config.gpus import GPU_TYPES
from radixfleet.controllers.quota.asks import Ask
from radixfleet.controllers.quota.state import (
    Condition,
    ConditionType,
    Counted,
    GpuAccount,
    TenantStatus,
)
from radixfleet.kit.errors import RETRY_SHORTLY

# ---- borrowing ------------------------------------------------------------------------------


def accounts(
    budgets: Mapping[str, Mapping[str, GpuBudget]],
    committed: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, GpuAccount]]:
    """Every tenant's account of every GPU type it has a budget of or commitments on."""
    result: dict[str, dict[str, GpuAccount]] = {t: {} for t in [*budgets, *committed]}
    types = {g for per in [*budgets.values(), *committed.values()] for g in per}
    for gpu in sorted(types):
        for tenant, account in _accounts_of_type(gpu, budgets, committed).items():
            result[tenant][gpu] = account
    return result


def _accounts_of_type(
    gpu: str,
    budgets: Mapping[str, Mapping[str, GpuBudget]],
    committed: Mapping[str, Mapping[str, int]],
) -> dict[str, GpuAccount]:
    tenants = [
        t
        for t in {*budgets, *committed}
        if gpu in budgets.get(t, {}) or gpu in committed.get(t, {})
    ]
    budget = {t: budgets.get(t, {}).get(gpu, GpuBudget(guaranteed=0)) for t in tenants}
    used = {t: committed.get(t, {}).get(gpu, 0) for t in tenants}
    unused = {t: max(0, budget[t].guaranteed - used[t]) for t in tenants}
    over = {t: max(0, used[t] - budget[t].guaranteed) for t in tenants}
    total_unused, total_over = sum(unused.values()), sum(over.values())
    result = {}
    for t in tenants:
        lendable = max(0, (total_unused - unused[t]) - (total_over - over[t]))
        result[t] = GpuAccount(
            guaranteed=budget[t].guaranteed,
            borrow=budget[t].borrow,
            borrowable=min(budget[t].borrow, lendable),
            committed=used[t],
        )
    return result


# ---- admission ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Whether an InferenceService may be created or changed, and why not."""

    allowed: bool
    message: str = ""


ALLOWED = Verdict(True)


@dataclass(frozen=True)
class TenantView:
    """A Tenant as the admission policy sees it: its spec's budgets and its last status.

    `status` None: the controller has not accounted the tenant yet, and nothing that asks for
    GPUs is admitted (fail closed: the ceiling depends on the others' usage).
    """

    name: str
    namespaces: Sequence[str]
    budget: Mapping[str, GpuBudget]
    status: TenantStatus | None

    def governs(self, namespace: str) -> bool:
        # The namespaces the controller granted (a namespace claimed twice goes to the older
        # tenant); before the first status, the spec's claim.
        granted = self.namespaces if self.status is None else self.status.namespaces
        return namespace in granted

    @classmethod
    def of(cls, obj: TenantObject) -> TenantView:
        tenant = obj.tenant
        assert tenant is not None
        return cls(obj.name, tenant.namespaces, tenant.gpu_budget, obj.status)


def admit_in(namespace: str, ask: Ask, views: Iterable[TenantView]) -> Verdict:
    """The admission policy's answer: every Tenant that governs the namespace must admit."""
    for view in views:
        verdict = admit(ask, view) if view.governs(namespace) else ALLOWED
        if not verdict.allowed:
            return verdict
    return ALLOWED


def admit(ask: Ask, view: TenantView) -> Verdict:
    """Whether `ask` fits the tenant's budget; the message names tenant, budget and numbers."""
    if ask.gpus_per_replica <= 0:
        return ALLOWED
    if ask.problem is not None:
        return _deny(view, ask.problem)
    assert ask.gpu_type is not None
    counted = None if view.status is None else view.status.commitments.get(ask.key)
    if counted is not None and counted.gpu_type == ask.gpu_type and ask.gpus <= counted.gpus:
        return ALLOWED  # never block a change that commits no more (a canary step, a shrink)
    budget = view.budget.get(ask.gpu_type)
    if budget is None:
        return _deny(
            view, f"{ask.key} asks for {ask.gpu_type} GPUs; the tenant has no {ask.gpu_type} budget"
        )
    account = None if view.status is None else view.status.gpus.get(ask.gpu_type)
    if account is None:
        return _deny(
            view,
            f"its {ask.gpu_type} budget is not accounted yet by the quota controller "
            f"(see the Tenant's conditions); {RETRY_SHORTLY}",
        )
    return _within(ask, view, budget, account, counted)


def _within(
    ask: Ask, view: TenantView, budget: GpuBudget, account: GpuAccount, counted: Counted | None
) -> Verdict:
    mine = counted.gpus if counted is not None and counted.gpu_type == ask.gpu_type else 0
    others = account.committed - mine
    # The spec may have shrunk since the status was written: never admit past it.
    ceiling = min(account.ceiling, budget.guaranteed + budget.borrow)
    if others + ask.gpus <= ceiling:
        return ALLOWED
    return _deny(
        view, budget_message(ask, others=others, ceiling=ceiling, budget=budget, account=account)
    )


def budget_message(
    ask: Ask, *, others: int, ceiling: int, budget: GpuBudget, account: GpuAccount
) -> str:
    return (
        f"{ask.gpu_type} budget exceeded: {ask.key} asks for {ask.gpus} GPUs "
        f"({ask.describe()}), {others} are committed by its other InferenceServices, "
        f"and the ceiling is {ceiling} ({budget.guaranteed} guaranteed + "
        f"{min(account.borrowable, budget.borrow)} borrowable now of {budget.borrow})"
    )


def _deny(view: TenantView, why: str) -> Verdict:
    return Verdict(False, f"tenant {view.name}: {why}")


# ---- ResourceQuota split --------------------------------------------------------------------


def split_quota(total: int, committed: Mapping[str, int]) -> dict[str, int]:
    """`requests.nvidia.com/gpu` for each of a tenant's namespaces; the shares add up to `total`.

    ResourceQuota is per namespace while a budget is per tenant. Within budget, each namespace
    gets what it committed plus an even share of the headroom (for rollout surges and GPU pods
    of its own); over budget, `total` is shared in proportion to the commitments.
    """
    names = sorted(committed)
    if not names:
        return {}
    used = sum(committed.values())
    if used <= total:
        return {
            n: committed[n] + s
            for n, s in zip(names, _shares(total - used, [1] * len(names)), strict=True)
        }
    return dict(zip(names, _shares(total, [committed[n] for n in names]), strict=True))


def _shares(total: int, weights: Sequence[int]) -> list[int]:
    """Largest-remainder split of `total` by `weights` (all equal when they sum to zero)."""
    weights = list(weights) if sum(weights) > 0 else [1] * len(weights)
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


# ---- the controller's decision -----------------------------------------------------------------


@dataclass(frozen=True)
class TenantObject:
    """One Tenant as read: its parsed spec, or why it could not be parsed."""

    name: str
    created: str  # creationTimestamp; the older claim to a namespace wins
    generation: int = 0
    tenant: Tenant | None = None
    spec_error: str | None = None
    status: TenantStatus | None = None


@dataclass(frozen=True)
class Quota:
    """The controller's ResourceQuota in one namespace: None where there is none yet."""

    hard: int | None = None
    used: int = 0


@dataclass(frozen=True)
class Observed:
    """A snapshot of everything the decision reads."""

    tenants: Sequence[TenantObject]
    asks: Sequence[Ask] = ()
    unreadable: Mapping[str, str] = field(default_factory=dict)  # "ns/name" -> why
    quotas: Mapping[str, Quota] = field(default_factory=dict)  # by namespace
    missing_secrets: Mapping[str, Sequence[str]] = field(default_factory=dict)  # by tenant
    # When each resolved key of a tenant expires (None: never), by tenant.
    api_keys: Mapping[str, Sequence[datetime | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class SetQuota:
    """Create or change the ResourceQuota of one namespace."""

    namespace: str
    tenant: str
    hard: int


@dataclass(frozen=True)
class Plan:
    """Statuses to write (only those that changed) and ResourceQuotas to set."""

    statuses: dict[str, TenantStatus]
    quotas: list[SetQuota]
    accounts: dict[str, dict[str, GpuAccount]]


def decide(observed: Observed, now: datetime) -> Plan:
    """Account every tenant, write its status, and size its namespaces' ResourceQuotas."""
    owners, conflicts = claims(observed.tenants)
    valid = {t.name: t.tenant for t in observed.tenants if t.tenant is not None}
    counted = _counted(observed.asks, owners)
    committed = {t: _by_type(c.values()) for t, c in counted.items()}
    budgets = {name: _known(tenant.gpu_budget) for name, tenant in valid.items()}
    table = accounts(budgets, {t: committed.get(t, {}) for t in valid})
    statuses, quotas = {}, []
    for obj in observed.tenants:
        status = _status(obj, observed, owners, conflicts, counted, table, now)
        if status != obj.status:
            statuses[obj.name] = status
        quotas += _quotas(obj.name, status, observed)
    return Plan(statuses=statuses, quotas=quotas, accounts=table)


def claims(tenants: Iterable[TenantObject]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Namespace -> owning tenant (the oldest claim wins), and each tenant's lost claims."""
    owners: dict[str, str] = {}
    conflicts: dict[str, list[str]] = defaultdict(list)
    for obj in sorted(tenants, key=lambda t: (t.created, t.name)):
        for ns in obj.tenant.namespaces if obj.tenant else ():
            if owners.setdefault(ns, obj.name) != obj.name:
                conflicts[obj.name].append(f"{ns} (claimed by tenant {owners[ns]})")
    return owners, dict(conflicts)


def _counted(asks: Iterable[Ask], owners: Mapping[str, str]) -> dict[str, dict[str, Counted]]:
    counted: dict[str, dict[str, Counted]] = defaultdict(dict)
    for ask in asks:
        owner = owners.get(ask.namespace)
        if owner is not None and ask.gpu_type is not None and ask.gpus > 0:
            counted[owner][ask.key] = Counted(gpu_type=ask.gpu_type, gpus=ask.gpus)
    return dict(counted)


def _by_type(counted: Iterable[Counted]) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for c in counted:
        total[c.gpu_type] += c.gpus
    return dict(total)


def _known(budget: Mapping[str, GpuBudget]) -> dict[str, GpuBudget]:
    return {gpu: b for gpu, b in budget.items() if gpu in GPU_TYPES}


def _status(
    obj: TenantObject,
    observed: Observed,
    owners: Mapping[str, str],
    conflicts: Mapping[str, list[str]],
    counted: Mapping[str, dict[str, Counted]],
    table: Mapping[str, dict[str, GpuAccount]],
    now: datetime,
) -> TenantStatus:
    granted = sorted(ns for ns, owner in owners.items() if owner == obj.name)
    gpus = table.get(obj.name, {})
    resolved = observed.api_keys.get(obj.name, ())
    live = sum(1 for end in resolved if end is None or end > now)
    found = [
        _claims_condition(conflicts.get(obj.name, [])),
        _gpu_types_condition(obj),
        _keys_condition(observed.missing_secrets.get(obj.name, ()), resolved, live),
        _budget_condition(gpus, _unreadable_in(observed.unreadable, granted)),
    ]
    conditions = [_ready(obj, found), *found]
    return TenantStatus(
        observed_generation=obj.generation,
        namespaces=granted,
        gpus=gpus,
        running_gpus=sum(observed.quotas.get(ns, Quota()).used for ns in granted),
        commitments=counted.get(obj.name, {}),
        api_keys=live,  # what the entries accept now: an expired key is refused
        conditions=[_stamped(c, obj, now) for c in conditions],
    )


def _unreadable_in(unreadable: Mapping[str, str], namespaces: Sequence[str]) -> list[str]:
    return [
        f"{key}: {why}"
        for key, why in sorted(unreadable.items())
        if key.split("/")[0] in namespaces
    ]


# A condition before it is stamped with time and generation: (type, ok, reason, message).
Found = tuple[ConditionType, bool, str, str]


def _claims_condition(lost: Sequence[str]) -> Found:
    if lost:
        return (ConditionType.NAMESPACES_CLAIMED, False, "NamespaceClaimedByAnotherTenant",
                f"not governed by this tenant: {', '.join(lost)}")  # fmt: skip
    return (ConditionType.NAMESPACES_CLAIMED, True, "Claimed", "")


def _gpu_types_condition(obj: TenantObject) -> Found:
    unknown = sorted(set(obj.tenant.gpu_budget) - set(GPU_TYPES)) if obj.tenant else []
    if unknown:
        return (ConditionType.GPU_TYPES_KNOWN, False, "UnknownGpuType",
                f"no such GPU type: {', '.join(unknown)} (known: {', '.join(GPU_TYPES)}); "
                "its budget is ignored")  # fmt: skip
    return (ConditionType.GPU_TYPES_KNOWN, True, "Known", "")


def _keys_condition(
    missing: Sequence[str], resolved: Sequence[datetime | None], live: int
) -> Found:
    if missing:
        return (
            ConditionType.API_KEYS_RESOLVED,
            False,
            "SecretMissing",
            f"API key Secrets not found: {', '.join(missing)} (radixfleet reads only the "
            "Secrets its Role in the namespace names: render the tenant with its keys)",
        )
    if resolved and not live:
        last = max(end for end in resolved if end is not None)
        return (
            ConditionType.API_KEYS_RESOLVED,
            False,
            "AllKeysExpired",
            f"every API key has expired, the last at {last.isoformat()}: add a new one",
        )
    return (ConditionType.API_KEYS_RESOLVED, True, "Resolved", "")


def _budget_condition(gpus: Mapping[str, GpuAccount], unreadable: Sequence[str]) -> Found:
    over = [
        f"{g}: {a.committed} committed > ceiling {a.ceiling}"
        for g, a in sorted(gpus.items())
        if a.committed > a.ceiling
    ]
    if over:
        return (ConditionType.WITHIN_BUDGET, False, "OverCommitted",
                "; ".join(over) + " (a lender took back its guaranteed GPUs, or two admissions "
                "raced); new pods wait until the tenant is back within budget")  # fmt: skip
    if unreadable:
        return (ConditionType.WITHIN_BUDGET, False, "UncountedInferenceServices",
                "; ".join(unreadable))  # fmt: skip
    return (ConditionType.WITHIN_BUDGET, True, "WithinBudget", "")


def _ready(obj: TenantObject, found: Sequence[Found]) -> Found:
    if obj.spec_error is not None:
        return (ConditionType.READY, False, "InvalidSpec", obj.spec_error)
    failed = [f for f in found if not f[1]]
    if failed:
        return (ConditionType.READY, False, failed[0][2], failed[0][3])
    return (ConditionType.READY, True, "Ready", "")


def _stamped(found: Found, obj: TenantObject, now: datetime) -> Condition:
    kind, ok, reason, message = found
    status = "True" if ok else "False"
    before = obj.status.condition(kind) if obj.status else None
    since = before.last_transition_time if before is not None and before.status == status else now
    return Condition(type=kind, status=status, reason=reason, message=message,
                     last_transition_time=since, observed_generation=obj.generation)  # fmt: skip


def _quotas(tenant: str, status: TenantStatus, observed: Observed) -> list[SetQuota]:
    committed = {ns: 0 for ns in status.namespaces}
    for key, c in status.commitments.items():
        committed[key.split("/")[0]] += c.gpus
    total = sum(a.ceiling for a in status.gpus.values())
    wanted = split_quota(total, committed)
    return [
        SetQuota(namespace=ns, tenant=tenant, hard=hard)
        for ns, hard in wanted.items()
        if observed.quotas.get(ns, Quota()).hard != hard
    ]
