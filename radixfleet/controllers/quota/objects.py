"""The quota's objects in a catalog's manifests: the cluster-scoped Tenant of every catalog
tenant (`radixfleet render` and `pulumi up` both write them, through
`radixfleet.kit.registry.catalog_objects`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Catalog, Tenant
from radixfleet.config.serving import Served, api_keys_secret, namespace_of
from radixfleet.controllers.quota import spec as quota


def tenant_object(tenant: Tenant) -> dict[str, Any]:
    """The cluster-scoped Tenant object of a catalog tenant: what the quota controller enforces
    (GPUs, tokens, priority) and where the region entry finds the tenant's API keys."""
    keys = [
        quota.SecretKeyRef(
            name=api_keys_secret(tenant),
            namespace=namespace_of(tenant),
            key=key.name,
            expires_at=key.expires_at,
        )
        for key in tenant.api_keys
    ]
    spec = quota.TenantSpec.from_tenant(tenant, api_keys=keys)
    return {
        "apiVersion": f"{labels.GROUP}/{quota.API_VERSION}",
        "kind": quota.KIND,
        "metadata": {"name": tenant.name, "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": spec.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


def catalog_objects(catalog: Catalog, served: Iterable[Served]) -> list[dict[str, Any]]:
    """Every tenant of the catalog, wherever its models are served: the quota counts a
    tenant's GPUs across its namespaces, and the entry knows its keys before its first model."""
    del served
    return [tenant_object(tenant) for tenant in catalog.tenants]
