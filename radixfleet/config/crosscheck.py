"""Rules that relate catalog entries to each other; each broken rule is one `Problem`.

`check_catalog` never stops at the first problem: a platform team fixing a catalog wants the
whole list in one run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from radixfleet.config.catalog import (
    CATALOG_RUNTIMES,
    Catalog,
    GpuPool,
    KvCache,
    Model,
    Region,
)
from radixfleet.config.errors import Finding
from radixfleet.config.gpus import GIB, GPU_TYPES, INSTANCE_TYPES
from radixfleet.config.modelcache import (
    NODE_RESERVED_GIB,
    CachedWeights,
    cache_limit_gib,
    cached_weights,
    caching_pools,
)
from radixfleet.config.pdcheck import pd_pair
from radixfleet.config.sizing import (
    HICACHE_GB,
    device_kv_bytes,
    hicache_gb_per_rank,
    kv_capacity_tokens,
    node_reserve_gib,
    pod_memory_gib,
)
from radixfleet.profile import BUILTIN_PROFILES

# Storage a multi-node replica can load from (KServe refuses the others for a workerSpec).
MULTINODE_STORAGE = ("pvc", "oci")

# Hub organisations whose model repositories are gated (a download without a token answers
# 401): Meta's Llama licence must be accepted per account.
GATED_HUB_ORGS = ("meta-llama",)


def check_catalog(catalog: Catalog) -> list[Finding]:
    """Every cross-entry problem of a structurally valid catalog, in file order."""
    return [
        *_duplicates(catalog),
        *_regions(catalog),
        *_tenants(catalog),
        *_model_caches(catalog),
        *(f for i, m in enumerate(catalog.models) for f in _model(catalog, i, m)),
        *_storage_lanes(catalog),
    ]


def _duplicate_names(section: str, names: Iterable[str]) -> Iterator[Finding]:
    names = list(names)
    for name, count in Counter(names).items():
        if count > 1:
            index = [i for i, n in enumerate(names) if n == name][1]
            yield f"{section}[{index}].name", f"duplicate name {name!r}"


def _duplicates(catalog: Catalog) -> Iterator[Finding]:
    yield from _duplicate_names("regions", (r.name for r in catalog.regions))
    yield from _duplicate_names("tenants", (t.name for t in catalog.tenants))
    yield from _duplicate_names("models", (m.name for m in catalog.models))
    owners: dict[str, str] = {}
    for i, tenant in enumerate(catalog.tenants):
        for j, ns in enumerate(tenant.namespaces):
            if ns in owners and owners[ns] != tenant.name:
                yield (
                    f"tenants[{i}].namespaces[{j}]",
                    f"namespace {ns!r} is already claimed by tenant {owners[ns]!r}",
                )
            owners.setdefault(ns, tenant.name)


def _regions(catalog: Catalog) -> Iterator[Finding]:
    for i, region in enumerate(catalog.regions):
        yield from _duplicate_names(f"regions[{i}].gpu_pools", (p.name for p in region.gpu_pools))
        for j, pool in enumerate(region.gpu_pools):
            loc = f"regions[{i}].gpu_pools[{j}]"
            instance = INSTANCE_TYPES.get(pool.instance_type)
            if instance is None:
                known = ", ".join(sorted(INSTANCE_TYPES))
                yield (
                    f"{loc}.instance_type",
                    f"unknown GPU instance type {pool.instance_type!r} (known: {known})",
                )
            elif instance.gpu_type != pool.gpu_type or instance.gpus != pool.gpus_per_node:
                yield (
                    f"{loc}.gpu_type",
                    f"{pool.instance_type} has {instance.gpus}x {instance.gpu_type}, "
                    f"not {pool.gpus_per_node}x {pool.gpu_type}",
                )
            if pool.min_nodes > pool.max_nodes:
                yield f"{loc}.min_nodes", f"{pool.min_nodes} is above max_nodes {pool.max_nodes}"
            if pool.headroom_gpus > pool.max_nodes * pool.gpus_per_node:
                yield (
                    f"{loc}.headroom_gpus",
                    f"{pool.headroom_gpus} is more than the pool's {pool.max_nodes} nodes "
                    f"of {pool.gpus_per_node} GPUs hold",
                )


def _model_caches(catalog: Catalog) -> Iterator[Finding]:
    """A cache fits its nodes' volume; a region's pools of one GPU type cache all or none (the
    cache's volume keeps a cached model's pods on the caching nodes, so a pool without it
    would serve none of them); the cached models fit the smallest pool's cache."""
    for i, region in enumerate(catalog.regions):
        for j, pool in enumerate(region.gpu_pools):
            room = pool.root_volume_gib - NODE_RESERVED_GIB
            if pool.model_cache_gib > room:
                yield (
                    f"regions[{i}].gpu_pools[{j}].model_cache_gib",
                    f"{pool.model_cache_gib} GiB leaves less than {NODE_RESERVED_GIB} GiB of "
                    f"the node's {pool.root_volume_gib} GiB volume (root_volume_gib) for "
                    "images and scratch",
                )
        weights = cached_weights(region, catalog.models)
        for gpu_type in sorted({p.gpu_type for p in region.gpu_pools}):
            yield from _one_type_cache(i, region, gpu_type, weights)


def _one_type_cache(
    index: int, region: Region, gpu_type: str, weights: list[CachedWeights]
) -> Iterator[Finding]:
    pools = [p for p in region.gpu_pools if p.gpu_type == gpu_type]
    caching = caching_pools(region, gpu_type)
    if not caching:
        return
    if len(caching) < len(pools):
        bare = next(p for p in pools if not p.model_cache_gib)
        yield (
            f"regions[{index}].gpu_pools[{region.gpu_pools.index(bare)}].model_cache_gib",
            f"the {gpu_type} pools of {region.name} cache models all or none: {bare.name} "
            f"has no cache, {caching[0].name} has {caching[0].model_cache_gib} GiB",
        )
    held = [w for w in weights if gpu_type in w.gpu_types]
    needed, limit = sum(w.gib for w in held), cache_limit_gib(region, gpu_type)
    if needed > limit:
        smallest = min(caching, key=lambda p: p.model_cache_gib)
        sizes = ", ".join(f"{w.name} {w.gib}" for w in held)
        yield (
            f"regions[{index}].gpu_pools[{region.gpu_pools.index(smallest)}].model_cache_gib",
            f"{limit} GiB do not hold the {needed} GiB of the {gpu_type} models "
            f"{region.name} caches ({sizes})",
        )


def _tenants(catalog: Catalog) -> Iterator[Finding]:
    models = {m.name for m in catalog.models}
    for i, tenant in enumerate(catalog.tenants):
        for gpu_type in tenant.gpu_budget:
            if gpu_type not in GPU_TYPES:
                yield f"tenants[{i}].gpu_budget.{gpu_type}", f"unknown GPU type {gpu_type!r}"
        per_model = tenant.token_budget.per_model if tenant.token_budget else {}
        for model in per_model:
            if model not in models:
                yield f"tenants[{i}].token_budget.per_model.{model}", f"no model named {model!r}"


def _model(catalog: Catalog, index: int, model: Model) -> Iterator[Finding]:
    loc = f"models[{index}]"
    yield from _model_references(catalog, loc, model)
    yield from _model_parallelism(loc, model)
    yield from _model_runtime(catalog, loc, model)
    if model.min_replicas > model.max_replicas:
        yield (
            f"{loc}.min_replicas",
            f"{model.min_replicas} is above max_replicas {model.max_replicas}",
        )
    if model.gpu_type in GPU_TYPES:
        capacity = kv_capacity_tokens(model)
        if model.context_length > capacity:
            yield (
                f"{loc}.context_length",
                f"{model.context_length} tokens do not fit the KV budget of one replica "
                f"({capacity} tokens on {model.gpus_per_replica}x {model.gpu_type})",
            )
    if model.kv_cache is not None:
        yield from _kv_cache(catalog, f"{loc}.kv_cache", model, model.kv_cache)


def _kv_cache(catalog: Catalog, loc: str, model: Model, tier: KvCache) -> Iterator[Finding]:
    """A host KV tier SGLang starts with (whole GB per rank, larger than the device pool),
    that the nodes of the model's pools hold, on no storage backend infra does not provide."""
    if tier.storage_backend is not None:
        yield f"{loc}.storage_backend", (
            f"{tier.storage_backend!r}: infra provides no KV storage backend yet, host memory "
            "is the only tier below the GPUs (infra/README.md, KV cache tiers)"
        )  # fmt: skip
    per_rank = hicache_gb_per_rank(model)
    if per_rank < 1:
        # --hicache-size is an int of GB; 0 is SGLang's "unset": it would size the pool by
        # --hicache-ratio instead, past the pod's memory limit.
        yield f"{loc}.host_gib", (
            f"{tier.host_gib} GiB over the replica's {model.gpus_per_replica} ranks is under "
            "1 GB each: SGLang takes --hicache-size per rank in whole GB"
        )  # fmt: skip
    elif model.gpu_type in GPU_TYPES:
        yield from _host_above_device(loc, model, tier, per_rank)
    for region in (r for r in catalog.regions if r.name in model.regions):
        for pool in (p for p in region.gpu_pools if p.gpu_type == model.gpu_type):
            yield from _pool_holds_pods(loc, model, region, pool)


def _host_above_device(loc: str, model: Model, tier: KvCache, per_rank: int) -> Iterator[Finding]:
    # sglang 0.5.23 starts with a host pool no larger than the device pool, but warns
    # (mem_cache/pool_host/base.py, `_allocate_host_buffer`) that "L2 cache effectiveness is
    # reduced": under write-through the host keeps a copy of every block on the GPU, so such a
    # tier holds nothing the GPU does not. The catalog refuses what SGLang only warns of. What
    # SGLang compares is what it was given: the whole GB of each rank, not the catalog's GiB.
    host_bytes = per_rank * HICACHE_GB * model.gpus_per_replica
    device = device_kv_bytes(model)
    if host_bytes <= device:
        yield f"{loc}.host_gib", (
            f"{tier.host_gib} GiB ({per_rank} GB a rank, {model.gpus_per_replica} ranks) is not "
            f"larger than the replica's KV pool on its GPUs ({device / GIB:.1f} GiB: "
            f"{kv_capacity_tokens(model)} tokens of {model.architecture.kv_bytes_per_token} "
            "bytes): it would hold only copies of what is on the GPUs (SGLang warns of it)"
        )  # fmt: skip


def _pool_holds_pods(loc: str, model: Model, region: Region, pool: GpuPool) -> Iterator[Finding]:
    """The pods of `model` that fill a node of `pool` fit the node's memory less its reserve:
    each requests its host tier, so a node the kubelet cannot give it leaves GPUs idle."""
    instance = INSTANCE_TYPES.get(pool.instance_type)
    pod_gpus = model.gpus_per_replica // model.nodes
    if instance is None or pod_gpus == 0 or pool.gpus_per_node < pod_gpus:
        return  # an unknown instance type, more nodes than GPUs, a pod too large: reported
    pods, pod_gib = pool.gpus_per_node // pod_gpus, pod_memory_gib(model)
    reserve = node_reserve_gib(instance.memory_gib)
    room = instance.memory_gib - reserve
    if pods * pod_gib > room:
        yield f"{loc}.host_gib", (
            f"{pods} pods of {pod_gib} GiB need {pods * pod_gib} GiB of a node of pool "
            f"{region.name}/{pool.name} ({pool.instance_type}), which has {room} GiB for pods "
            f"({instance.memory_gib} GiB less {reserve} GiB for the kubelet and the system)"
        )  # fmt: skip


def _lora_references(loc: str, model: Model, tenants: set[str]) -> Iterator[Finding]:
    """Each adapter's owner is one of the model's tenants, and each tenant sees an adapter:
    every tenant runs its own base with its own adapters (Model.for_tenant)."""
    for j, adapter in enumerate(model.lora_adapters):
        if adapter.tenant is not None and adapter.tenant not in model.tenants:
            known = adapter.tenant in tenants
            yield f"{loc}.lora_adapters[{j}].tenant", (
                f"{adapter.tenant!r} is not one of the model's tenants"
                if known else f"no tenant named {adapter.tenant!r}"
            )  # fmt: skip
    for j, tenant in enumerate(model.tenants if model.lora_adapters else []):
        if not any(a.seen_by(tenant) for a in model.lora_adapters):
            yield f"{loc}.tenants[{j}]", (
                f"{tenant!r} owns no adapter of this LoRA model and none is shared (an adapter "
                "without a tenant): its copy of the base would serve nothing"
            )  # fmt: skip


def _hub_token(loc: str, model: Model) -> Iterator[Finding]:
    """A gated hub repository needs a token: without one the pod's download (or the router's
    tokenizer) fails with 401 only after a GPU node was bought and joined, so it is an error
    here, where it costs nothing."""
    if model.hf_token_secret is not None:
        return
    for field, source in (("storage_uri", model.storage_uri), ("tokenizer", model.tokenizer)):
        if source and source.startswith("hf://") and _gated(source):
            yield f"{loc}.{field}", (
                f"{source} is a gated repository: name the Secret holding a hub token in "
                "hf_token_secret ({name, key}), or its download fails with 401"
            )  # fmt: skip


def _gated(uri: str) -> bool:
    return uri.removeprefix("hf://").split("/", 1)[0] in GATED_HUB_ORGS


def _model_references(catalog: Catalog, loc: str, model: Model) -> Iterator[Finding]:
    tenants = {t.name for t in catalog.tenants}
    regions = {r.name: r for r in catalog.regions}
    for j, tenant in enumerate(model.tenants):
        if tenant not in tenants:
            yield f"{loc}.tenants[{j}]", f"no tenant named {tenant!r}"
    yield from _lora_references(loc, model, tenants)
    yield from _hub_token(loc, model)
    for j, wanted in enumerate(model.regions):
        if wanted not in regions:
            yield f"{loc}.regions[{j}]", f"no region named {wanted!r}"
    if model.gpu_type not in GPU_TYPES:
        yield (
            f"{loc}.gpu_type",
            f"unknown GPU type {model.gpu_type!r} (known: {', '.join(GPU_TYPES)})",
        )
        return
    for j, region_name in enumerate(model.regions):
        region = regions.get(region_name)
        if region is None:
            continue
        pools = [p for p in region.gpu_pools if p.gpu_type == model.gpu_type]
        if not pools:
            yield (
                f"{loc}.regions[{j}]",
                f"region {region_name!r} has no GPU pool of type {model.gpu_type}",
            )
        elif all(p.gpus_per_node < model.gpus_per_replica // model.nodes for p in pools):
            most = max(p.gpus_per_node for p in pools)
            yield (
                f"{loc}.gpus_per_replica",
                f"{model.gpus_per_replica // model.nodes} GPUs per node do not fit the "
                f"{model.gpu_type} pools of region {region_name!r} ({most} GPUs per node)",
            )


def _model_parallelism(loc: str, model: Model) -> Iterator[Finding]:
    gpus, tp, pp, ep = (
        model.gpus_per_replica,
        model.tensor_parallel,
        model.pipeline_parallel,
        model.expert_parallel,
    )
    if gpus % tp:
        yield f"{loc}.tensor_parallel", f"{tp} does not divide gpus_per_replica {gpus}"
    elif gpus % pp:
        yield f"{loc}.pipeline_parallel", f"{pp} does not divide gpus_per_replica {gpus}"
    elif tp * pp != gpus:
        yield (
            f"{loc}.gpus_per_replica",
            f"{gpus} GPUs but tensor_parallel x pipeline_parallel is {tp * pp}",
        )
    if tp % ep:
        yield f"{loc}.expert_parallel", f"{ep} does not divide tensor_parallel {tp}"
    if gpus % model.nodes:
        yield f"{loc}.nodes", f"{model.nodes} nodes do not divide gpus_per_replica {gpus}"


def _model_runtime(catalog: Catalog, loc: str, model: Model) -> Iterator[Finding]:
    runtime = model.runtime
    if runtime not in CATALOG_RUNTIMES:
        known = ", ".join(CATALOG_RUNTIMES)
        yield f"{loc}.runtime", f"unknown runtime {runtime!r} (known: {known})"
        return
    rules = {
        "sglang": (model.gpus_per_replica == 1, "runs one GPU per replica; use sglang-tp"),
        "sglang-tp": (model.nodes == 1, "runs on one node; use sglang-multinode"),
        "sglang-multinode": (model.nodes == 2, "runs on exactly two nodes (head and worker)"),
        "sglang-lora": (bool(model.lora_adapters), "needs at least one entry in lora_adapters"),
    }
    ok, why = rules.get(runtime, (True, ""))
    if not ok:
        yield f"{loc}.runtime", f"{runtime} {why}"
    if runtime != "sglang-multinode" and model.nodes > 1:
        yield f"{loc}.nodes", f"{model.nodes} nodes need runtime sglang-multinode"
    if model.canary_policy is not None and model.nodes > 1:
        yield f"{loc}.canary_policy", "multi-node models run in RawDeployment mode: no canaries"
    scheme = model.storage_uri.split("://", 1)[0]
    if model.nodes > 1 and scheme not in MULTINODE_STORAGE:
        # Head and workers must see the same weights without each downloading them: KServe's
        # webhook takes only a PVC or an OCI image (inference_service_validation.go).
        yield f"{loc}.storage_uri", f"multi-node models load from pvc:// or oci://, not {scheme}://"
    yield from _weights_claim(loc, model, scheme)
    if model.lora_adapters and runtime != "sglang-lora":
        yield f"{loc}.lora_adapters", f"LoRA adapters need runtime sglang-lora, not {runtime}"
    if model.profile is not None and model.profile not in BUILTIN_PROFILES:
        known = ", ".join(sorted(BUILTIN_PROFILES))
        yield f"{loc}.profile", f"unknown profile {model.profile!r} (known: {known})"
    yield from pd_pair(catalog, loc, model)


def _weights_claim(loc: str, model: Model, scheme: str) -> Iterator[Finding]:
    if scheme == "pvc" and model.weights_claim is None:
        claim = model.storage_uri.removeprefix("pvc://").split("/", 1)[0]
        yield (
            f"{loc}.weights_claim",
            (
                f"no claim {claim!r} is made for {model.storage_uri}: give weights_claim: "
                "{storage_class: CLASS} (radixfleet render creates it) or {existing: true}"
            ),
        )
    elif scheme != "pvc" and model.weights_claim is not None:
        yield f"{loc}.weights_claim", f"only a pvc:// model has a claim, not {scheme}://"


def _storage_lanes(catalog: Catalog) -> Iterator[Finding]:
    """No tenant reads another's adapter: a URI a tenant's pods load (its models' weights, the
    adapters it sees) may not lie inside, or contain, an adapter another tenant owns. Each URI
    becomes a read grant of that tenant's role (infra), so a shared model at
    `s3://radixfleet-models/adapters` would let every tenant of it read every adapter there."""
    owned = [(a.storage_uri, a.tenant) for m in catalog.models for a in m.lora_adapters if a.tenant]
    for i, model in enumerate(catalog.models):
        loaded: list[tuple[str, str, str | None]] = [
            (f"models[{i}].storage_uri", model.storage_uri, None)
        ]
        loaded += [
            (f"models[{i}].lora_adapters[{j}].storage_uri", a.storage_uri, a.tenant)
            for j, a in enumerate(model.lora_adapters)
        ]
        for loc, uri, owner in loaded:
            readers = model.tenants if owner is None else [owner]  # each with its own grant
            reached = {(o, u) for r in readers for u, o in owned if o != r and _overlap(uri, u)}
            for other, other_uri in sorted(reached):
                yield loc, f"{uri} reaches tenant {other!r}'s adapter {other_uri}"


def _overlap(first: str, second: str) -> bool:
    """Whether one storage URI lies inside the other (or both are one folder)."""
    a, b = (f"{uri.removesuffix('/')}/" for uri in (first, second))
    return a.startswith(b) or b.startswith(a)
