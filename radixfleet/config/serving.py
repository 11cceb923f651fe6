"""Where the catalog's models are served: each tenant's namespace, the tenants a model is served
to, the metadata every object about a served model carries, and the Secret of a tenant's keys.

The InferenceService builder, the controllers' own objects (their `objects.py`) and the Pulumi
program all place objects by these rules, so a model's InferenceService and its policies always
meet in one namespace under one name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, get_args

from radixfleet import labels
from radixfleet.config.catalog import Catalog, Model, Tenant

# A model served to a tenant: one InferenceService, and the objects about it. A prefill/decode
# model is served as two, one per role (`inference_services_of`).
Served = tuple[Model, Tenant]

PdRole = Literal["prefill", "decode"]
PD_ROLES: tuple[PdRole, ...] = get_args(PdRole)


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
    """Every InferenceService of the catalog's models with every tenant it is served to, in the
    catalog's order (a prefill/decode model's prefill, then its decode)."""
    for model in catalog.models:
        for tenant in served_tenants(catalog, model):
            for isvc in inference_services_of(model):
                yield isvc, tenant


def inference_services_of(model: Model) -> list[Model]:
    """The InferenceServices `model` is served as: itself, or a prefill/decode model's roles."""
    if model.disaggregation is None:
        return [model]
    return [role_model(model, role) for role in PD_ROLES]


def role_model(model: Model, role: PdRole) -> Model:
    """One role of a prefill/decode model as the InferenceService `<name>-<role>`: its runtime,
    its own replica bounds, and no canary (a pair rolls out as one, which canary cannot yet)."""
    assert model.disaggregation is not None, f"{model.name} is not a prefill/decode model"
    bounds = model.disaggregation.prefill if role == "prefill" else model.disaggregation.decode
    return model.model_copy(update={
        "name": f"{model.name}-{role}", "runtime": f"sglang-{role}",
        "min_replicas": bounds.min_replicas, "max_replicas": bounds.max_replicas,
    })  # fmt: skip


def pd_role(isvc: Model) -> PdRole | None:
    """The role an InferenceService of a prefill/decode model serves (`role_model`'s), or None."""
    if isvc.disaggregation is None:
        return None
    return next((role for role in PD_ROLES if isvc.runtime == f"sglang-{role}"), None)


def model_name(isvc: Model) -> str:
    """The name tenants call the model by: a role's pair's, else the InferenceService's own."""
    role = pd_role(isvc)
    return isvc.name.removesuffix(f"-{role}") if role else isvc.name


def model_metadata(model: Model, tenant: Tenant) -> dict[str, Any]:
    """Name, namespace and labels of an object about `model` served to `tenant` (a role of a
    prefill/decode model is labelled with the pair's name and its role)."""
    role = pd_role(model)
    return {
        "name": model.name,
        "namespace": namespace_of(tenant),
        "labels": {
            labels.MODEL: model_name(model),
            **({labels.PD_ROLE: role} if role else {}),
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
