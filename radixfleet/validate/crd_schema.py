"""Turn a CRD's openAPIV3Schema into a JSON Schema that validates the way the API server does.

The API server prunes or (with strict field validation, kubectl's default) rejects fields a
structural schema does not declare; JSON Schema allows them unless told otherwise. So every
object schema with `properties` becomes closed (`additionalProperties: false`) unless it says
`x-kubernetes-preserve-unknown-fields`, and the Kubernetes extensions with a JSON Schema meaning
(`x-kubernetes-int-or-string`, `nullable`) are translated. CEL rules (`x-kubernetes-validations`)
are not evaluated here; the API-server tests cover them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from radixfleet.kit.registry import crds

SCHEMA_PACKAGES = ("kserve", "knative", "prometheus")
INTEGER_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# The InferenceService CRD is 2 MB of YAML: the C loader reads it ten times faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class CrdKey:
    """The identity of a custom resource type: apiVersion and kind."""

    api_version: str
    kind: str


def to_json_schema(node: Any) -> Any:
    """A structural openAPIV3Schema node translated to JSON Schema, recursively."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    closed = "properties" in node and "additionalProperties" not in node
    if closed and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    # JSON Schema's string formats differ from the API server's, so formats are dropped; the
    # integer ones the API server enforces (a replica count is an int32) become bounds.
    low, high = INTEGER_BOUNDS.get(out.pop("format", None), (None, None))
    if low is not None:
        out.setdefault("minimum", low)
        out.setdefault("maximum", high)
    return out


@functools.cache
def crd_schemas() -> dict[CrdKey, dict[str, Any]]:
    """JSON Schemas of every shipped CRD's served versions, by apiVersion and kind."""
    schemas: dict[CrdKey, dict[str, Any]] = {}
    root = resources.files("radixfleet.schemas")
    for package in SCHEMA_PACKAGES:
        for entry in sorted(root.joinpath(package).iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".yaml"):
                continue
            doc = yaml.load(entry.read_text(encoding="utf-8"), Loader=_LOADER)
            if doc.get("kind") == "CustomResourceDefinition":
                schemas.update(_versions(doc))
    # radixfleet's own, built from the controllers' spec types as `radixfleet render` builds
    # deploy/crds/ (an installed wheel has the code, not the repository's rendered copy).
    for crd in crds():
        schemas.update(_versions(crd))
    return schemas


def _versions(crd: dict[str, Any]) -> dict[CrdKey, dict[str, Any]]:
    group = crd["spec"]["group"]
    kind = crd["spec"]["names"]["kind"]
    return {
        CrdKey(f"{group}/{v['name']}", kind): _object_schema(v["schema"]["openAPIV3Schema"])
        for v in crd["spec"]["versions"]
        if v.get("served", True)
    }


def _object_schema(root: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a custom object. `apiVersion`, `kind` and `metadata` are allowed
    whether the CRD's schema declares them or not: the API server never prunes them (a schema
    that lists only `status`, as kopf's ClusterKopfPeering's does, still takes a named object).
    `metadata` stays open: the API server checks it as ObjectMeta, and a CRD's schema may only
    narrow `name` and `generateName` (labels, annotations and the rest are always allowed)."""
    schema: dict[str, Any] = to_json_schema(root)
    properties = schema.setdefault("properties", {})
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    metadata = properties.setdefault("metadata", {"type": "object"})
    if isinstance(metadata, dict):
        metadata.pop("additionalProperties", None)
    return schema
