"""Where the catalog's models are served: each tenant's namespace, the tenants a model is served
to, the metadata every object about a served model carries, and the Secret of a tenant's keys.

The InferenceService builder, the controllers' own objects (their `objects.py`) and the Pulumi
program all place objects by these rules, so a model's InferenceService and its policies always
meet in one namespace under one name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Catalog, Model, Tenant

# A model served to a tenant: one InferenceService, and the objects about it.
Served = tuple[Model, Tenant]


def namespace_of(tenant: Tenant) -> str:
    """A tenant's models live in its first namespace."""
    return tenant.namespaces[0]


def served_tenants(catalog: Catalog, model: Model) -> list[Tenant]:
    """Tenants that get their own InferenceService of `model`: every one, on its own GPUs.

    A LoRA model too: each tenant's base serves that tenant's adapters and the shared ones
    (`Model.for_tenant`). One base for all would batch adapters together, but would mount each
    tenant's adapter in the pods of another tenant's namespace, which reads them.
    """
    return [catalog.tenant(n) for n in model.tenants]


def served(catalog: Catalog) -> Iterator[Served]:
    """Every model of the catalog with every tenant it is served to, in the catalog's order."""
    for model in catalog.models:
        for tenant in served_tenants(catalog, model):
            yield model, tenant


def model_metadata(model: Model, tenant: Tenant) -> dict[str, Any]:
    """Name, namespace and labels of an object about `model` served to `tenant`."""
    return {
        "name": model.name,
        "namespace": namespace_of(tenant),
        "labels": {
            labels.MODEL: model.name,
            labels.TENANT: tenant.name,
            labels.MANAGED_BY: labels.MANAGER,
        },
    }


def api_keys_secret(tenant: Tenant) -> str:
    """The Secret, in the tenant's namespace, that holds the tenant's API keys, one data key per
    key the catalog names (`api_keys`): filled by `pulumi up` from the stack's secret config
    (infra/), or by the platform team on the kubectl path.

    Only its name is rendered: a key never sits in a manifest.
    """
    return f"{tenant.name}-api-keys"
