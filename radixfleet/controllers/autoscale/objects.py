"""The autoscaler's objects in a catalog's manifests: one AutoscalePolicy per served model
(`radixfleet render` and `pulumi up` both write them, through
`radixfleet.kit.registry.catalog_objects`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Catalog, Model, Tenant
from radixfleet.config.serving import Served, model_metadata
from radixfleet.controllers.autoscale import spec as autoscale


def autoscale_policy(model: Model, tenant: Tenant) -> dict[str, Any]:
    """The AutoscalePolicy of `model`'s InferenceService for `tenant`: the catalog's replica
    bounds and SLOs, every other knob at the policy type's defaults
    (radixfleet/controllers/autoscale/spec.py).
    """
    spec = autoscale.AutoscalePolicySpec(
        inference_service=model.name,
        min_replicas=model.min_replicas,
        max_replicas=model.max_replicas,
        slo=autoscale.Slo(ttft_p95_ms=model.slo.ttft_p95_ms, itl_p95_ms=model.slo.itl_p95_ms),
    )
    return {
        "apiVersion": f"{labels.GROUP}/{autoscale.API_VERSION}",
        "kind": autoscale.KIND,
        "metadata": model_metadata(model, tenant),
        # Defaults stay implicit (they live on the type); what the catalog says stays explicit.
        "spec": spec.model_dump(by_alias=True, mode="json", exclude_defaults=True)
        | {
            "minReplicas": model.min_replicas,
            "maxReplicas": model.max_replicas,
            "slo": spec.slo.model_dump(by_alias=True, mode="json"),
        },
    }


def catalog_objects(catalog: Catalog, served: Iterable[Served]) -> list[dict[str, Any]]:
    """An AutoscalePolicy per served model. Multi-node models get none: KServe refuses
    autoscaling of a head and its workers."""
    del catalog
    return [autoscale_policy(model, tenant) for model, tenant in served if model.nodes == 1]
