"""Observe: read Tenants, InferenceServices, ResourceQuotas and Secrets into `decide.Observed`.

A Tenant whose spec does not parse is kept (its status says why) rather than dropped: dropping
it would hand its namespaces to no one silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from radixfleet.controllers.quota.asks import Ask, BadAskError, ask_of
from radixfleet.controllers.quota.decide import Observed, Quota, TenantObject
from radixfleet.controllers.quota.ports import InferenceServices, ResourceQuotas, Secrets, Tenants
from radixfleet.controllers.quota.spec import GPU_QUOTA_RESOURCE, TenantSpec
from radixfleet.controllers.quota.state import TenantStatus


def tenant_object(obj: Mapping[str, Any]) -> tuple[TenantObject, TenantSpec | None]:
    """One Tenant as the decision reads it, and its wire spec (None when it does not parse)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    try:
        spec = TenantSpec.model_validate(obj.get("spec") or {})
    except ValidationError as error:
        spec, why = None, _short(error)
    found = TenantObject(
        name=name,
        created=str(meta.get("creationTimestamp", "")),
        generation=int(meta.get("generation", 0)),
        tenant=None if spec is None else spec.to_tenant(name),
        spec_error=None if spec is not None else why,
        status=TenantStatus.from_wire(obj.get("status")),
    )
    return found, spec


def _short(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())


def observe(
    *, tenants: Tenants, isvcs: InferenceServices, quotas: ResourceQuotas, secrets: Secrets
) -> Observed:
    """Everything `decide` needs, read through the ports."""
    parsed = [tenant_object(obj) for obj in tenants.list()]
    claimed = sorted({ns for obj, _ in parsed if obj.tenant for ns in obj.tenant.namespaces})
    asks, unreadable = read_asks(i for i in isvcs.everywhere() if _namespace(i) in claimed)
    missing, resolved = check_keys(parsed, secrets)
    return Observed(
        tenants=[obj for obj, _ in parsed],
        asks=asks,
        unreadable=unreadable,
        quotas={ns: quota_of(quotas.get(ns)) for ns in claimed},
        missing_secrets=missing,
        api_keys=resolved,
    )


def _namespace(isvc: Mapping[str, Any]) -> str:
    return str((isvc.get("metadata") or {}).get("namespace", ""))


def read_asks(isvcs: Iterable[Mapping[str, Any]]) -> tuple[list[Ask], dict[str, str]]:
    asks, unreadable = [], {}
    for isvc in isvcs:
        try:
            asks.append(ask_of(isvc))
        except BadAskError as error:
            meta = isvc.get("metadata") or {}
            unreadable[f"{meta.get('namespace')}/{meta.get('name')}"] = str(error)
    return asks, unreadable


def quota_of(quota: Mapping[str, Any] | None) -> Quota:
    """Hard and used GPUs of a ResourceQuota (whole GPUs: quantities like "4")."""
    if quota is None:
        return Quota()
    hard = (quota.get("spec") or {}).get("hard", {}).get(GPU_QUOTA_RESOURCE)
    used = (quota.get("status") or {}).get("used", {}).get(GPU_QUOTA_RESOURCE, 0)
    return Quota(hard=None if hard is None else int(hard), used=int(used))


def check_keys(
    parsed: Iterable[tuple[TenantObject, TenantSpec | None]], secrets: Secrets
) -> tuple[dict[str, list[str]], dict[str, list[datetime | None]]]:
    """Per tenant: the key references that resolve to nothing, and when each one that resolves
    expires (None: never); whether it has expired is the decision's, which knows the time."""
    missing: dict[str, list[str]] = {}
    resolved: dict[str, list[datetime | None]] = {}
    for obj, spec in parsed:
        found = [(ref, bool(secrets.key(ref))) for ref in (spec.api_keys if spec else [])]
        if absent := [str(ref) for ref, ok in found if not ok]:
            missing[obj.name] = absent
        resolved[obj.name] = [ref.expires_at for ref, ok in found if ok]
    return missing, resolved


@dataclass(frozen=True)
class ApiKeys:
    """The region entry's keys: whose each is, and when the ones that expire do."""

    tenants: dict[str, str] = field(default_factory=dict)  # API key -> tenant
    expiries: dict[str, datetime] = field(default_factory=dict)  # API key -> expiry, if any


def api_keys(tenants: Iterable[Mapping[str, Any]], secrets: Secrets) -> ApiKeys:
    """Every tenant's keys, each Secret read once. A key two tenants share is dropped: a
    request with it could be charged to either. A key named twice by its tenant expires at
    the later of its expiries, or never if one reference has none."""
    owners: dict[str, set[str]] = {}
    expiries: dict[str, list[datetime | None]] = {}
    for obj in tenants:
        found, spec = tenant_object(obj)
        for ref in spec.api_keys if spec else []:
            if key := secrets.key(ref):
                owners.setdefault(key, set()).add(found.name)
                expiries.setdefault(key, []).append(ref.expires_at)
    owned = {key: next(iter(names)) for key, names in owners.items() if len(names) == 1}
    ends = {key: _latest(expiries[key]) for key in owned}
    return ApiKeys(owned, {key: end for key, end in ends.items() if end is not None})


def _latest(expiries: list[datetime | None]) -> datetime | None:
    """The latest of a key's expiries; None (never) if one of them is."""
    found = [end for end in expiries if end is not None]
    return max(found) if len(found) == len(expiries) else None
