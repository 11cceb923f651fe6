"""The claims `radixfleet render` makes for pvc:// models' weights (radixfleet/render/weights.py):
sized from the weights, ReadWriteMany where several nodes mount them, none for a claim the
catalog says exists, and one per namespace for models that share it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.config.catalog import WeightsClaim
from radixfleet.config.load import load_catalog
from radixfleet.config.serving import served
from radixfleet.config.sizing import weight_gib
from radixfleet.render.weights import build_weights_claims

REPO = Path(__file__).resolve().parents[1]
CATALOG = load_catalog(REPO / "inferenceservices" / "catalog.yaml")
BIG = next(m for m in CATALOG.models if m.nodes > 1)
RESEARCH = CATALOG.tenant("research")


def _claims(*pairs: Any) -> list[dict[str, Any]]:
    return build_weights_claims(pairs)


def test_the_multinode_models_claim_is_rendered_beside_it_for_both_nodes() -> None:
    (claim,) = _claims((BIG, RESEARCH))
    assert claim["metadata"] == {
        "name": "model-cache",
        "namespace": "team-research",
        "labels": {"app.kubernetes.io/managed-by": "radixfleet"},
    }
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "head and worker on two nodes"
    assert claim["spec"]["storageClassName"] == "model-weights"
    assert claim["spec"]["resources"]["requests"]["storage"] == "415Gi"  # 405 GB of FP8, +10 %
    rendered = (
        REPO / "inferenceservices" / "team-research" / "persistentvolumeclaim-model-cache.yaml"
    )
    assert yaml.safe_load(rendered.read_text()) == claim


@pytest.mark.parametrize(
    ("update", "modes"),
    [({"nodes": 1, "max_replicas": 1, "runtime": "sglang-tp"}, [["ReadWriteOnce"]]),
     ({"nodes": 1, "max_replicas": 2, "runtime": "sglang-tp"}, [["ReadWriteMany"]]),
     ({"weights_claim": WeightsClaim(existing=True)}, []),
     ({"storage_uri": "s3://bucket/big", "weights_claim": None}, [])],
    ids=["one-pod-one-node", "replicas-over-nodes", "an-existing-claim", "not-on-a-claim"],
)  # fmt: skip
def test_what_a_model_on_a_claim_asks_for(update: dict[str, Any], modes: list[list[str]]) -> None:
    model = BIG.model_copy(update=update)
    assert [c["spec"]["accessModes"] for c in _claims((model, RESEARCH))] == modes


def test_models_sharing_a_claim_in_a_namespace_get_one_large_enough_for_both() -> None:
    small = BIG.model_copy(update={"name": "small", "nodes": 1, "max_replicas": 1})
    small = small.model_copy(update={"architecture": BIG.architecture.model_copy(
        update={"params_billion": 8.0})})  # fmt: skip
    (claim,) = _claims((small, RESEARCH), (BIG, RESEARCH))
    assert claim["spec"]["resources"]["requests"]["storage"] == "415Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


@given(st.floats(min_value=0.1, max_value=2000), st.sampled_from([0.5, 1.0, 2.0]))
def test_a_claim_always_holds_its_weights(params_billion: float, bytes_per_param: float) -> None:
    architecture = BIG.architecture.model_copy(
        update={"params_billion": params_billion, "weight_bytes_per_param": bytes_per_param}
    )
    model = BIG.model_copy(update={"architecture": architecture})
    (claim,) = _claims((model, RESEARCH))
    asked = int(claim["spec"]["resources"]["requests"]["storage"].removesuffix("Gi"))
    assert asked >= weight_gib(model) * 1.1 > 0


def test_every_rendered_claim_is_one_the_catalogs_served_models_ask_for() -> None:
    made = {(c["metadata"]["namespace"], c["metadata"]["name"])
            for c in build_weights_claims(served(CATALOG))}  # fmt: skip
    found = (REPO / "inferenceservices").glob("*/persistentvolumeclaim-*.yaml")
    files = {(p.parent.name, p.stem.removeprefix("persistentvolumeclaim-")) for p in found}
    assert made == files == {("team-research", "model-cache")}
