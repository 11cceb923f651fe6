"""A tenant onboarded on the test cluster as a platform team onboards one: its namespace (the
catalog's labels), its API key in the `api-keys` Secret, its routers' and the entry's access
(radixfleet/controllers/routers/manifests.py, radixfleet/render/tenant_access.py), and its
Tenant with a guaranteed H100 budget; then a wait until the quota controller has accounted it.
Its models are each test's own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from radixfleet import labels
from radixfleet.controllers.routers.manifests import access
from radixfleet.render.isolation import pod_security_labels
from radixfleet.render.tenant_access import tenant_access
from testbed.cluster import Cluster
from testbed.deploy import wait_accounted

KEYS_SECRET = "api-keys"


@dataclass(frozen=True)
class TenantSpec:
    """One tenant with one namespace. `tokens_per_minute=None` gives it no token budget;
    `namespace_labels` add to (or override) the catalog's, e.g. a stricter Pod Security."""

    name: str
    namespace: str
    key: str
    gpus: int = 2  # guaranteed H100s
    tokens_per_minute: int | None = 6_000_000
    namespace_labels: Mapping[str, str] = field(default_factory=dict)


def namespace_object(tenant: TenantSpec) -> dict[str, Any]:
    tenant_labels = {labels.TENANT: tenant.name, **pod_security_labels(),
                     **tenant.namespace_labels}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": tenant.namespace, "labels": tenant_labels}}  # fmt: skip


def tenant_object(tenant: TenantSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaces": [tenant.namespace],
        "gpuBudget": {"H100": {"guaranteed": tenant.gpus}},
        "apiKeys": [{"name": KEYS_SECRET, "namespace": tenant.namespace}],
    }
    if tenant.tokens_per_minute is not None:
        spec["tokenBudget"] = {"tokensPerMinute": tenant.tokens_per_minute}
    return {"apiVersion": "radixfleet.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": tenant.name}, "spec": spec}  # fmt: skip


def onboard(
    cluster: Cluster, tenant: TenantSpec, *, extra: Sequence[Mapping[str, Any]] = ()
) -> None:
    """Namespace, key, access, `extra` (e.g. the tenant's CanaryPolicy) and Tenant applied, and
    the tenant accounted: its GPU models may be applied next."""
    from testbed import session

    session.apply(cluster, [namespace_object(tenant)])
    cluster.kubectl("create", "secret", "generic", KEYS_SECRET, "-n", tenant.namespace,
                    f"--from-literal=api-key={tenant.key}")  # fmt: skip
    session.apply(cluster, [*access(tenant.namespace),
                            *tenant_access(tenant.namespace, [KEYS_SECRET]), *extra,
                            tenant_object(tenant)])  # fmt: skip
    wait_accounted(cluster, tenant.namespace)


def offboard(cluster: Cluster, tenant: TenantSpec) -> None:
    """The Tenant and its namespace deleted, not waited for (nothing after reuses them)."""
    cluster.kubectl("delete", "tenant", tenant.name, "--wait=false", check=False)
    cluster.kubectl("delete", "namespace", tenant.namespace, "--wait=false", check=False)


@contextmanager
def onboarded(cluster: Cluster, tenants: Sequence[TenantSpec]) -> Iterator[None]:
    """`tenants` onboarded for the block, and offboarded after however it ends (those not yet
    onboarded too: deleting what is not there is harmless)."""
    try:
        for tenant in tenants:
            onboard(cluster, tenant)
        yield
    finally:
        for tenant in tenants:
            offboard(cluster, tenant)
