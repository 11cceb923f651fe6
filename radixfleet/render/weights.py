"""The PersistentVolumeClaims the catalog's pvc:// models load their weights from.

A model whose weights are `pvc://CLAIM/PATH` and whose catalog entry asks for it
(`weights_claim: {storage_class: CLASS}`, radixfleet/config/catalog.py `WeightsClaim`) gets
claim CLAIM in each namespace it serves in, rendered beside its InferenceService: sized for its
weights with a tenth more (tokenizer, configuration, a format's overhead), in CLASS, and
ReadWriteMany when pods on several nodes mount it at once (a multi-node model's head and
workers, or replicas of one model spread over nodes), else ReadWriteOnce. Not ReadOnlyMany:
the claim starts empty, and something must write the weights into it once. Models sharing a
claim in one namespace get one claim, large enough for the largest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Model, Tenant
from radixfleet.config.serving import namespace_of
from radixfleet.config.sizing import weight_gib

HEADROOM = 1.1  # the weights and a tenth more


def claim_name(model: Model) -> str | None:
    """CLAIM of a `pvc://CLAIM/PATH` model; None for any other storage."""
    if not model.storage_uri.startswith("pvc://"):
        return None
    return model.storage_uri.removeprefix("pvc://").split("/", 1)[0]


def pvc_size_gib(model: Model) -> int:
    """What the claim asks for: the weights and a tenth more, in whole GiB."""
    return math.ceil(weight_gib(model) * HEADROOM)


def access_mode(model: Model) -> str:
    """ReadWriteMany when pods on several nodes mount the claim at once."""
    return "ReadWriteMany" if model.nodes > 1 or model.max_replicas > 1 else "ReadWriteOnce"


def build_weights_claims(pairs: Iterable[tuple[Model, Tenant]]) -> list[dict[str, Any]]:
    """One claim per (namespace, CLAIM) that a served model asks render to create."""
    claims: dict[tuple[str, str], dict[str, Any]] = {}
    for model, tenant in pairs:
        name, wanted = claim_name(model), model.weights_claim
        if name is None or wanted is None or wanted.storage_class is None:
            continue
        claim = _claim(name, namespace_of(tenant), wanted.storage_class, model)
        found = claims.setdefault((namespace_of(tenant), name), claim)
        claims[(namespace_of(tenant), name)] = _larger(found, claim)
    return [claims[key] for key in sorted(claims)]


def _claim(name: str, namespace: str, storage_class: str, model: Model) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {
            "accessModes": [access_mode(model)],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": f"{pvc_size_gib(model)}Gi"}},
        },
    }  # fmt: skip


def _larger(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Of two models' wishes for one claim: the larger size, and ReadWriteMany if either asks."""
    size = max(_gib(first), _gib(second))
    modes = {*first["spec"]["accessModes"], *second["spec"]["accessModes"]}
    mode = "ReadWriteMany" if "ReadWriteMany" in modes else "ReadWriteOnce"
    spec = {**first["spec"], "accessModes": [mode],
            "resources": {"requests": {"storage": f"{size}Gi"}}}  # fmt: skip
    return {**first, "spec": spec}


def _gib(claim: dict[str, Any]) -> int:
    return int(str(claim["spec"]["resources"]["requests"]["storage"]).removesuffix("Gi"))
