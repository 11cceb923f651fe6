"""What the catalog puts into a region: its runtimes and InferenceServices, the controllers'
objects, tenant namespaces, keys and access, the failover's policies, the GPU headroom and the
model cache.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.manifests.base import Manifest
from infra.manifests.platform import CONTROLLERS_NAMESPACE
from radixfleet.config import Catalog, Region
from radixfleet.config.catalog import KNOWN_RUNTIMES
from radixfleet.config.serving import Served, api_keys_secret, namespace_of, served
from radixfleet.controllers.failover.objects import failover_policy
from radixfleet.dataplane.signals import PREFIX as SIGNALS_PREFIX
from radixfleet.kit.registry import catalog_objects
from radixfleet.platform import KSERVE_NAMESPACE
from radixfleet.render import headroom, modelcache
from radixfleet.render.inferenceservices import (
    build_inference_service,
    build_model_reader,
    build_namespaces,
    build_network_policies,
)
from radixfleet.render.runtimes import build_runtime
from radixfleet.render.tenant_access import secret_access

# `fleet.<region>.<domain>`: where the failover reads a region's signals (its entry).
SIGNALS_HOST = "fleet"


def gpu_headroom(region: Region, *, image: str) -> list[Manifest]:
    """The placeholders holding each pool's `headroom_gpus` free, and their PriorityClass once
    (radixfleet/render/headroom.py); nothing when no pool asks for headroom."""
    return headroom.headroom(region.gpu_pools, image=image)


def model_cache(
    catalog: Catalog, region: Region, *, bucket_from: str, bucket_to: str, image: str
) -> list[Manifest]:
    """The node groups and caches of the weights `region`'s GPU nodes keep
    (radixfleet/render/modelcache.py), read from the region's bucket like its
    InferenceServices (KServe matches a cache to a predictor by the storage URI), and the
    DaemonSet that hands the nodes' cache folder to KServe's agent (`image`: the
    controllers'); nothing when the region caches nothing."""
    docs = modelcache.model_cache(region, catalog.models)
    if not docs:
        return []
    # Beside KServe's own node agent: it needs a host folder and root, which radixfleet's
    # namespace (Pod Security `restricted`) refuses.
    keeper = modelcache.folder_keeper(image=image, namespace=KSERVE_NAMESPACE)
    return [keeper, *(rewrite_bucket(doc, bucket_from, bucket_to) for doc in docs)]


def runtimes(*, image: str) -> list[Manifest]:
    """Every SGLang ClusterServingRuntime, running `image` (a pinned reference): cluster-wide
    and cheap, so every region has them all."""
    return [build_runtime(name, image=image)[0] for name in KNOWN_RUNTIMES]


def _region_models(catalog: Catalog, region: Region) -> Iterator[Served]:
    """(model, tenant) of every InferenceService that runs in `region`."""
    return ((model, tenant) for model, tenant in served(catalog) if region.name in model.regions)


def region_inference_services(
    catalog: Catalog, region: Region, *, bucket_from: str, bucket_to: str
) -> list[Manifest]:
    """The InferenceServices of the models that run in `region`, reading the region's bucket."""
    return [
        rewrite_bucket(build_inference_service(model, tenant)[0], bucket_from, bucket_to)
        for model, tenant in _region_models(catalog, region)
    ]


def region_policies(catalog: Catalog, region: Region) -> list[Manifest]:
    """The controllers' objects beside the region's InferenceServices, as `radixfleet render`
    writes them into inferenceservices/ and by the same rule (each controller's `objects`,
    `radixfleet.kit.registry.catalog_objects`): every Tenant (the quota's budgets, the entry's
    keys), and the CanaryPolicies and AutoscalePolicies of the region's models."""
    return catalog_objects(catalog, _region_models(catalog, region))


def model_prefixes(inference_services: Sequence[Manifest], *, bucket: str) -> dict[str, list[str]]:
    """Per namespace, the prefixes of `bucket` its InferenceServices read (weights, adapters)."""
    found: dict[str, set[str]] = {}
    for isvc in inference_services:
        uris = _strings(isvc["spec"])
        prefixes = {
            u.removeprefix(f"s3://{bucket}/") for u in uris if u.startswith(f"s3://{bucket}/")
        }
        found.setdefault(isvc["metadata"]["namespace"], set()).update(prefixes)
    return {ns: sorted(prefixes) for ns, prefixes in sorted(found.items()) if prefixes}


def cached_prefixes(model_cache: Sequence[Manifest], *, bucket: str) -> list[str]:
    """The prefixes of `bucket` the region's `LocalModelCache`s download."""
    uris = [d["spec"]["sourceModelUri"] for d in model_cache if d["kind"] == "LocalModelCache"]
    return sorted(
        u.removeprefix(f"s3://{bucket}/") for u in uris if u.startswith(f"s3://{bucket}/")
    )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def region_model_readers(catalog: Catalog, region: Region) -> list[Manifest]:
    """The service account serving pods run as in each of the region's tenant namespaces."""
    namespaces = sorted({namespace_of(t) for _, t in _region_models(catalog, region)})
    return [build_model_reader(namespace) for namespace in namespaces]


@dataclass(frozen=True)
class TenantKeys:
    """A tenant's key Secret in one region: where it goes and the values of its keys (secret:
    the Pulumi component marks them so)."""

    namespace: str
    secret: str
    values: Mapping[str, str]


def region_tenant_keys(
    catalog: Catalog, region: Region, values: Mapping[str, Mapping[str, str]]
) -> list[TenantKeys]:
    """The key Secret of each tenant served in `region` whose keys `values` holds (the stack's
    `tenantKeys`): the same values in every region, so a key works wherever its tenant is."""
    served = {tenant.name: tenant for _, tenant in _region_models(catalog, region)}
    return [
        TenantKeys(namespace_of(tenant), api_keys_secret(tenant), dict(values[name]))
        for name, tenant in sorted(served.items())
        if values.get(name)
    ]


def region_secret_access(catalog: Catalog, region: Region) -> list[Manifest]:
    """The operator's and the entry's Secrets access in each of the region's namespaces: the
    data plane's key and the API keys of the tenants there (radixfleet/render/tenant_access.py)."""
    return secret_access(tenant for _, tenant in _region_models(catalog, region))


def region_network_policies(catalog: Catalog, region: Region) -> list[Manifest]:
    """The NetworkPolicies of each of the region's tenant namespaces."""
    namespaces = sorted({namespace_of(t) for _, t in _region_models(catalog, region)})
    return [obj for namespace in namespaces for obj in build_network_policies(namespace)]


def signals_name(region: str, domain: str) -> str:
    """The region's own name for the fleet's failover: its entry, behind its load balancer."""
    return f"{SIGNALS_HOST}.{region}.{domain}"


def failover_policies(
    catalog: Catalog, regions: Sequence[str], *, zone_id: str, domain: str,
    weights: Mapping[str, int],
) -> list[Manifest]:  # fmt: skip
    """A FailoverPolicy per model served in two or more of `regions`, for the operator that
    runs the failover: it reads each region's Prometheus through that region's entry."""
    policies = []
    for model in catalog.models:
        served = [r for r in regions if r in model.regions]
        if len(served) < 2:
            continue  # one region has nowhere to fail over to
        urls = {r: f"https://{signals_name(r, domain)}{SIGNALS_PREFIX}" for r in served}
        policies.append(failover_policy(
            catalog, model, namespace=CONTROLLERS_NAMESPACE, hosted_zone_id=zone_id,
            record_name=f"{model.name}.{domain}", signals_urls=urls, weights=weights,
        ))  # fmt: skip
    return policies


def region_namespaces(catalog: Catalog, isvcs: list[Manifest]) -> list[Manifest]:
    """Tenant namespaces that hold at least one of the region's InferenceServices."""
    used = {isvc["metadata"]["namespace"] for isvc in isvcs}
    return [ns for ns in build_namespaces(catalog) if ns["metadata"]["name"] in used]


def tenant_namespaces(catalog: Catalog) -> list[str]:
    return [namespace_of(t) for t in catalog.tenants]


def rewrite_bucket(value: Any, bucket_from: str, bucket_to: str) -> Any:
    """`value` with every `s3://<bucket_from>/...` string pointing at `bucket_to` instead."""
    old, new = f"s3://{bucket_from}/", f"s3://{bucket_to}/"
    if isinstance(value, str):
        return new + value[len(old) :] if value.startswith(old) else value
    if isinstance(value, dict):
        return {k: rewrite_bucket(v, bucket_from, bucket_to) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_bucket(v, bucket_from, bucket_to) for v in value]
    return value
