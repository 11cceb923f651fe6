"""The failover's objects: one FailoverPolicy per model served in two or more regions. Only
`pulumi up` writes them (infra/manifests/region.py): a policy names the fleet's DNS zone and each
region's signals URL, which a catalog alone does not know."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Catalog, Model
from radixfleet.config.serving import namespace_of, served_tenants
from radixfleet.controllers.failover import spec as failover


def failover_policy(
    catalog: Catalog,
    model: Model,
    *,
    namespace: str,
    hosted_zone_id: str,
    record_name: str,
    signals_urls: Mapping[str, str],
    weights: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The FailoverPolicy of `model`'s global name across the regions in `signals_urls` (each
    region's Prometheus as its entry relays it, radixfleet/dataplane/signals.py), judged on the
    catalog's TTFT SLO over every tenant's InferenceService of the model. Needs two regions.
    """
    regions = [
        {"name": name, "prometheusUrl": url, "weight": (weights or {}).get(name, 100)}
        for name, url in signals_urls.items()
    ]
    spec = failover.FailoverPolicySpec.model_validate(
        {
            "hostedZoneId": hosted_zone_id,
            "recordName": record_name,
            "models": [model.name],
            "namespaces": [namespace_of(t) for t in served_tenants(catalog, model)],
            "regions": regions,
            "signals": {"ttftSloSeconds": model.slo.ttft_p95_ms / 1000},
        }
    )
    return {
        "apiVersion": f"{labels.GROUP}/{failover.API_VERSION}",
        "kind": failover.KIND,
        "metadata": {"name": model.name, "namespace": namespace,
                     "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": spec.model_dump(by_alias=True, mode="json", exclude_defaults=True),
    }  # fmt: skip
