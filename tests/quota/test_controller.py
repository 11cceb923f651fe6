"""The act layer on recording fakes (a fleet from the catalog, bad input, failed writes) and the
kopf registration. The adapters meet a real API server in tests/quota/test_kube.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from radixfleet.config import load_catalog
from radixfleet.controllers.quota.controller import Controller, register
from radixfleet.controllers.quota.fakes import (
    FakeInferenceServices,
    FakeResourceQuotas,
    FakeSecrets,
    FakeTenants,
)
from radixfleet.controllers.quota.metrics import GpuMetrics
from radixfleet.controllers.quota.spec import TenantSpec
from radixfleet.controllers.quota.state import ConditionType, TenantStatus
from radixfleet.kit.errors import KubeError

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def tenant(
    name: str, spec: dict[str, Any], *, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    meta = {"name": name, "creationTimestamp": created, "generation": 1}
    return {
        "apiVersion": "radixfleet.io/v1alpha1",
        "kind": "Tenant",
        "metadata": meta,
        "spec": spec,
    }


def catalog_fleet() -> tuple[FakeTenants, FakeInferenceServices]:
    """The example catalog's tenants as Tenant objects, and its rendered InferenceServices."""
    catalog = load_catalog(REPO / "inferenceservices/catalog.yaml")
    tenants = FakeTenants()
    for t in catalog.tenants:
        spec = TenantSpec.from_tenant(t).model_dump(mode="json", by_alias=True)
        tenants.add(tenant(t.name, spec))
    rendered = [
        doc
        for path in sorted((REPO / "inferenceservices").glob("team-*/*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "InferenceService"
    ]
    return tenants, FakeInferenceServices(rendered)


def controller(tenants: FakeTenants, isvcs: FakeInferenceServices, **kw: Any) -> Controller:
    return Controller(
        tenants=tenants,
        isvcs=isvcs,
        quotas=kw.get("quotas", FakeResourceQuotas()),
        secrets=kw.get("secrets", FakeSecrets()),
        metrics=kw.get("metrics"),
    )


def status_of(tenants: FakeTenants, name: str) -> TenantStatus:
    found = TenantStatus.from_wire(tenants.items[name].get("status"))
    assert found is not None
    return found


def test_the_example_catalog_is_accounted_within_budget() -> None:
    tenants, isvcs = catalog_fleet()
    quotas, metrics = FakeResourceQuotas(), GpuMetrics(region="us-east-1")
    controller(tenants, isvcs, quotas=quotas, metrics=metrics).reconcile(now=T0)
    search = status_of(tenants, "search")
    # llama-3-1-8b (8 x 1) + llama-3-1-70b (3 x 4), both H100, in team-search.
    assert search.commitments["team-search/llama-3-1-70b"].gpus == 12
    assert search.gpus["H100"].committed == sum(c.gpus for c in search.commitments.values())
    for name in ("search", "support", "research"):
        ready = status_of(tenants, name).condition(ConditionType.READY)
        assert ready is not None and ready.ok, (name, ready)
    assert {ns for ns, _, _ in quotas.calls} == {"team-search", "team-support", "team-research"}
    committed = metrics.committed.labels("us-east-1", "search", "H100")._value.get()
    assert committed == search.gpus["H100"].committed


def test_a_second_reconcile_writes_nothing() -> None:
    tenants, isvcs = catalog_fleet()
    quotas = FakeResourceQuotas()
    fleet = controller(tenants, isvcs, quotas=quotas)
    fleet.reconcile(now=T0)
    writes, sets = len(tenants.status_writes), len(quotas.calls)
    fleet.reconcile(now=T0)
    assert (len(tenants.status_writes), len(quotas.calls)) == (writes, sets)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        pytest.param(
            {"namespaces": ["a"], "gpuBudget": {"H100": {"guaranteed": -1}}},
            "InvalidSpec",
            id="negative",
        ),
        pytest.param(
            {"namespaces": ["a"], "gpuBudget": {"H100": {"guaranteed": "8"}}},
            "InvalidSpec",
            id="non-numeric",
        ),
        pytest.param(
            {"namespaces": ["a"], "tokenBudget": {"tokensPerMinute": 0}},
            "InvalidSpec",
            id="zero-tokens",
        ),
        pytest.param({"namespaces": []}, "InvalidSpec", id="no-namespaces"),
        pytest.param(
            {"namespaces": ["a"], "gpuBudget": {"B300": {"guaranteed": 1}}},
            "UnknownGpuType",
            id="unknown-gpu",
        ),
        pytest.param(
            {"namespaces": ["a"], "apiKeys": [{"name": "gone", "namespace": "keys"}]},
            "SecretMissing",
            id="missing-secret",
        ),
    ],
)
def test_bad_input_is_a_clear_condition(spec: dict[str, Any], reason: str) -> None:
    # The CRD's schema rejects most of these before they exist; the controller still reports
    # them for objects that predate a schema or came in through another path.
    tenants = FakeTenants()
    tenants.add(tenant("x", spec))
    controller(tenants, FakeInferenceServices()).reconcile(now=T0)
    ready = status_of(tenants, "x").condition(ConditionType.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", reason)
    assert ready.message


def test_two_tenants_claiming_a_namespace() -> None:
    tenants = FakeTenants()
    tenants.add(tenant("old", {"namespaces": ["shared"]}, created="2026-01-01T00:00:00Z"))
    tenants.add(tenant("new", {"namespaces": ["shared", "mine"]}, created="2026-02-01T00:00:00Z"))
    controller(tenants, FakeInferenceServices()).reconcile(now=T0)
    claimed = status_of(tenants, "new").condition(ConditionType.NAMESPACES_CLAIMED)
    assert claimed is not None and claimed.message == (
        "not governed by this tenant: shared (claimed by tenant old)"
    )
    assert status_of(tenants, "new").namespaces == ["mine"]


def test_a_failed_status_write_raises_the_typed_error_and_the_next_pass_repairs() -> None:
    tenants, isvcs = catalog_fleet()
    tenants.next_error = KubeError("write status: HTTP 503", status=503)
    fleet = controller(tenants, isvcs)
    with pytest.raises(KubeError) as raised:
        fleet.reconcile(now=T0)
    assert raised.value.temporary
    fleet.reconcile(now=T0)
    assert all(t.get("status") for t in tenants.items.values())


def test_a_namespace_the_api_server_refuses_holds_back_no_other_quota() -> None:
    """A refused namespace (absent in this region, or not the operator's to write) is raised,
    so the loop retries it, after every other namespace got its cap; before, the first refusal
    left every later namespace without one."""
    tenants, isvcs = catalog_fleet()
    quotas = FakeResourceQuotas()
    quotas.next_error = KubeError("create resourcequota: HTTP 403 forbidden", status=403)
    with pytest.raises(KubeError) as raised:
        controller(tenants, isvcs, quotas=quotas).reconcile(now=T0)
    assert raised.value.status == 403
    refused, *written = [namespace for namespace, _, _ in quotas.calls]
    assert written and sorted(quotas.items) == sorted(written)
    assert refused not in quotas.items


def test_the_loop_retries_after_a_kube_error() -> None:
    tenants, isvcs = catalog_fleet()
    tenants.next_error = KubeError("HTTP 500", status=500)
    loop = register(kopf.OperatorRegistry(), controller(tenants, isvcs))
    loop.retry_seconds = 0.0

    async def once() -> bool:
        await loop.once()
        return loop.wake.is_set()

    assert asyncio.run(once())


def test_handlers_register_without_side_effects() -> None:
    tenants, isvcs = catalog_fleet()
    registry = kopf.OperatorRegistry()
    register(registry, controller(tenants, isvcs))
    assert len(list(registry._watching.get_all_handlers())) == 3
    assert tenants.status_writes == []
