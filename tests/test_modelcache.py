"""Model weights cached on the GPU nodes (KServe's LocalModelCache): which weights a region
caches and on which nodes, in manifests KServe v0.20.0's own CRD schemas accept, and every
InferenceService KServe matches to a cache finds its own GPU type's claim there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet import labels
from radixfleet.config import Catalog, Region, load_catalog
from radixfleet.render.inferenceservices import NODE_GROUP, build_inference_service
from radixfleet.render.modelcache import (
    AGENT_UID,
    JOBS_GID,
    NODE_LABELS,
    NODE_PATH,
    folder_keeper,
    model_cache,
)
from radixfleet.validate import validate_documents

EXAMPLE = Path(__file__).resolve().parent.parent / "inferenceservices" / "catalog.yaml"
CATALOG = load_catalog(EXAMPLE)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def caches(docs: list[dict[str, Any]]) -> dict[str, tuple[str, str, list[str]]]:
    return {
        d["metadata"]["name"]: (d["spec"]["sourceModelUri"], d["spec"]["modelSize"],
                                d["spec"]["nodeGroups"])
        for d in of_kind(docs, "LocalModelCache")
    }  # fmt: skip


def matches(cached_uri: str, storage_uri: str) -> bool:
    """KServe's rule (pkg/apis/serving/v1alpha1/storage_uri_utils.go, MatchStorageURI): the
    cached URI, or a folder below it."""
    cached, wanted = cached_uri.rstrip("/"), storage_uri.rstrip("/")
    return wanted == cached or wanted.startswith(cached + "/")


def kserve_pick(isvc: dict[str, Any], cached: list[tuple[str, str, list[str]]]) -> str | None:
    """The node group whose claim KServe's defaulter mounts into `isvc`'s pods, None when it
    serves it uncached (v0.20.0 inference_service_defaults.go, setLocalModelLabel): the first
    cache of its storage URI that lists its `nodegroup` annotation, else the cache's first
    group when it has no annotation."""
    uri = isvc["spec"]["predictor"]["model"].get("storageUri")
    group = isvc["metadata"]["annotations"].get(NODE_GROUP)
    for cached_uri, _, node_groups in cached:
        if uri and matches(cached_uri, uri):
            if group is None:
                return node_groups[0]
            if group in node_groups:
                return group
    return None


def test_the_example_region_caches_its_h100_models_on_its_h100_nodes() -> None:
    docs = model_cache(CATALOG.region("us-east-1"), CATALOG.models)

    assert validate_documents(docs, source="model-cache") == []
    [group] = of_kind(docs, "LocalModelNodeGroup")
    volume = group["spec"]["persistentVolumeSpec"]
    [term] = volume["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert group["metadata"]["name"] == "h100-nodes" and group["spec"]["storageLimit"] == "200Gi"
    assert term["matchExpressions"] == [{"key": labels.GPU_TYPE, "operator": "In",
                                         "values": ["h100"]}]  # fmt: skip
    assert volume["local"] == {"path": NODE_PATH}
    # Not the LoRA model (several storage URIs), the 405B (weights on a claim already) or the
    # H200 roles (no H200 pool caches).
    assert caches(docs) == {
        "llama-3-1-8b": ("s3://radixfleet-models/meta-llama/Llama-3.1-8B-Instruct", "15Gi",
                         ["h100-nodes"]),
        "llama-3-1-70b": ("s3://radixfleet-models/meta-llama/Llama-3.1-70B-Instruct", "132Gi",
                          ["h100-nodes"]),
    }  # fmt: skip


def test_a_region_whose_pools_cache_nothing_gets_no_cache() -> None:
    assert model_cache(CATALOG.region("eu-west-1"), CATALOG.models) == []


def with_caches(catalog: Catalog, region: str, sizes: dict[str, int]) -> Region:
    """`region` of `catalog` with the pools named in `sizes` caching that many GiB, no other."""
    pools = [p.model_copy(update={"model_cache_gib": sizes.get(p.name, 0)})
             for p in catalog.region(region).gpu_pools]  # fmt: skip
    return catalog.region(region).model_copy(update={"gpu_pools": pools})


def test_models_that_share_weights_share_one_cache_on_each_gpu_type() -> None:
    region = with_caches(CATALOG, "us-east-1", {"h100-ondemand": 200, "h100-spot": 200,
                                                "h200-ondemand": 200})  # fmt: skip
    docs = model_cache(region, CATALOG.models)

    assert validate_documents(docs, source="model-cache") == []
    assert [g["metadata"]["name"] for g in of_kind(docs, "LocalModelNodeGroup")] == [
        "h100-nodes", "h200-nodes"]  # fmt: skip
    # The 70B, its prefill role and its decode role read one storage URI: one cache on both
    # GPU types' nodes (KServe refuses a second cache of the same URI).
    assert caches(docs)["llama-3-1-70b"][2] == ["h100-nodes", "h200-nodes"]
    assert set(caches(docs)) == {"llama-3-1-8b", "llama-3-1-70b"}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_inference_service_kserve_matches_to_a_cache_finds_its_own_nodes(
    data: st.DataObject,
) -> None:
    name = data.draw(st.sampled_from([r.name for r in CATALOG.regions]), label="region")
    pools = CATALOG.region(name).gpu_pools
    caching = data.draw(st.sets(st.sampled_from([p.name for p in pools])), label="caching")
    region = with_caches(CATALOG, name, dict.fromkeys(caching, 500))
    docs = model_cache(region, CATALOG.models)
    groups = {g["metadata"]["name"]: g for g in of_kind(docs, "LocalModelNodeGroup")}
    cached = list(caches(docs).values())

    assert len({uri for uri, _, _ in cached}) == len(cached)  # KServe's validator's rule
    for model in (m for m in CATALOG.models if name in m.regions):
        isvc, _ = build_inference_service(model, CATALOG.tenant(model.tenants[0]))
        picked = kserve_pick(isvc, cached)
        type_caches = any(p.gpu_type == model.gpu_type for p in pools if p.name in caching)
        downloaded = model.storage_uri.startswith(("s3://", "gs://", "hf://"))
        if not (type_caches and downloaded and not model.lora_adapters):
            assert picked is None, model.name
            continue
        assert picked == isvc["metadata"]["annotations"][NODE_GROUP], model.name
        [term] = groups[picked]["spec"]["persistentVolumeSpec"]["nodeAffinity"]["required"][
            "nodeSelectorTerms"]  # fmt: skip
        assert term["matchExpressions"][0]["values"] == [
            isvc["spec"]["predictor"]["nodeSelector"][labels.GPU_TYPE]]  # fmt: skip


def test_the_folder_keeper_hands_the_nodes_cache_folder_over_with_two_capabilities() -> None:
    keeper = folder_keeper(image="radixfleet@sha256:" + "0" * 64, namespace="radixfleet-system")
    assert validate_documents([keeper], source="model-cache") == []
    pod = keeper["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == NODE_LABELS
    assert [t["key"] for t in pod["tolerations"]] == [labels.GPU_TAINT_KEY]
    assert pod["volumes"][0]["hostPath"]["path"] == NODE_PATH
    (prepare,) = pod["initContainers"]
    assert prepare["command"][:6] == ["install", "-d", "-o", str(AGENT_UID), "-g", str(JOBS_GID)]
    context = prepare["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"]
    (idle,) = pod["containers"]
    assert idle["securityContext"]["runAsNonRoot"] is True
    assert idle["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "volumeMounts" not in idle and pod["automountServiceAccountToken"] is False
