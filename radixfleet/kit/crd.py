"""A controller's CustomResourceDefinition, generated from its spec type.

The pydantic model in a controller's `spec.py` is the one statement of its fields, defaults and
bounds; `structural_schema` turns the model's JSON Schema into the structural OpenAPI v3
schema the API server takes (`$defs` inlined, no titles, an optional field as its type, no
`additionalProperties: false`: the API server prunes unknown fields instead). What only the API
server checks (CEL rules, list types, a bound the type leaves to a validator, a default the
server fills in) is carried on the type as metadata that changes no parsing: `Crd(...)` in a
field's `Annotated`, or `json_schema_extra` in a model's config. `definition` wraps the schema
with the names, printer columns and status of one resource.

Descriptions are the CRD's own (what `kubectl explain` shows a platform team), given by path
beside the CRD rather than taken from docstrings written for the Python reader; a description
whose path the schema lacks is an error, so a renamed field cannot leave one behind.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, to_jsonable_python

Schema = dict[str, Any]
MANAGED_BY = {"app.kubernetes.io/managed-by": "radixfleet"}
# The order keys are written in, so that a rendered CRD reads like a hand-written one.
_KEY_ORDER = (
    "type", "format", "description", "required", "default", "enum", "minimum", "maximum",
    "minLength", "maxLength", "pattern", "minItems", "maxItems", "maxProperties",
    "rule", "message",  # of a CEL rule
)  # fmt: skip


@dataclass(frozen=True, eq=False)  # eq=False: hashable by identity, as Annotated needs
class Crd:
    """What the CRD says of a field beyond its type: `schema` keys added to (or replacing)
    the field's own, and `default_from`, a factory whose value (in its wire form, unset
    fields left out) the API server fills in when the field is omitted."""

    schema: Mapping[str, Any] = field(default_factory=dict)
    default_from: Callable[[], Any] | None = None

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        found = handler(core_schema)
        found.update(copy.deepcopy(dict(self.schema)))
        if self.default_from is not None:
            found["default"] = wire(self.default_from())
        return found


def wire(value: Any) -> Any:
    """`value` as the API server would store it: camelCase keys, unset (None) fields left out."""
    return to_jsonable_python(value, by_alias=True, exclude_none=True)


def structural_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of `model`'s wire form."""
    found = model.model_json_schema(by_alias=True, mode="validation")
    definitions = found.pop("$defs", {})
    return _structural(found, definitions)


def _structural(node: Schema, definitions: Mapping[str, Schema]) -> Schema:
    node = _inline(node, definitions)
    out: Schema = {}
    for key, value in node.items():
        if key in ("title", "description") or (key == "default" and value is None):
            continue  # titles and docstrings are the Python reader's; descriptions come by path
        if key == "additionalProperties" and value is False:
            continue  # not allowed in a structural schema: the API server prunes instead
        out[key] = _structural_value(key, value, definitions)
    return _inclusive_bounds(out)


def _structural_value(key: str, value: Any, definitions: Mapping[str, Schema]) -> Any:
    if key == "properties":
        return {name: _structural(sub, definitions) for name, sub in value.items()}
    if key in ("items", "additionalProperties") and isinstance(value, dict):
        return _structural(value, definitions)
    return value


def _inline(node: Schema, definitions: Mapping[str, Schema]) -> Schema:
    """`node` with its `$ref` replaced by the definition, and an optional field (`anyOf` of a
    type and null) by that type; keys beside either (a default, a field's extras) win."""
    if "$ref" in node:
        rest = {k: v for k, v in node.items() if k != "$ref"}
        target = definitions[node["$ref"].rpartition("/")[2]]
        return {**_inline(target, definitions), **rest}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"a structural schema has one type per field: {node['anyOf']}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return {**_inline(options[0], definitions), **rest}
    return node


def _inclusive_bounds(node: Schema) -> Schema:
    """Exclusive bounds as the CRDs state them: an integer's as the next integer; a number's
    as an inclusive bound whose strictness a CEL rule on the field must state (required, so
    that no bound is silently widened)."""
    for exclusive, inclusive, step in (("exclusiveMinimum", "minimum", 1),
                                       ("exclusiveMaximum", "maximum", -1)):  # fmt: skip
        if exclusive not in node:
            continue
        bound = node.pop(exclusive)
        if node.get("type") == "integer":
            node[inclusive] = bound + step
        elif "x-kubernetes-validations" in node:
            node[inclusive] = bound
        else:
            raise ValueError(f"{exclusive} {bound} on a number needs a CEL rule to state it")
    return node


def describe(schema: Schema, descriptions: Mapping[str, str]) -> Schema:
    """`schema` with descriptions by path: dotted property names, `[]` for an array's items,
    `{}` for a map's values ("checks[].metric", "gpuBudget{}.borrow"); "" is the root."""
    described = copy.deepcopy(schema)
    for path, text in descriptions.items():
        _at(described, path)["description"] = text
    return described


def _at(schema: Schema, path: str) -> Schema:
    node = schema
    for step in path.replace("[]", ".[]").replace("{}", ".{}").split("."):
        if not step:
            continue
        if step == "[]":
            node = node["items"]
        elif step == "{}":
            node = node["additionalProperties"]
        elif step in node.get("properties", {}):
            node = node["properties"][step]
        else:
            raise KeyError(f"no field {step!r} on the way to {path!r}")
    return node


@dataclass(frozen=True)
class Names:
    """A resource's names: `kind` and `plural` and what `kubectl` accepts besides."""

    kind: str
    plural: str
    short_names: Sequence[str] = ()
    categories: Sequence[str] = ("radixfleet",)

    def as_spec(self) -> Schema:
        return {
            "kind": self.kind,
            "listKind": f"{self.kind}List",
            "plural": self.plural,
            "singular": self.kind.lower(),
            **({"shortNames": list(self.short_names)} if self.short_names else {}),
            **({"categories": list(self.categories)} if self.categories else {}),
        }


@dataclass(frozen=True)
class Column:
    """One additionalPrinterColumn: what `kubectl get` shows."""

    name: str
    type: str
    json_path: str
    description: str | None = None
    priority: int | None = None

    def as_spec(self) -> Schema:
        found: Schema = {"name": self.name, "type": self.type}
        if self.description is not None:
            found["description"] = self.description
        if self.priority is not None:
            found["priority"] = self.priority
        return {**found, "jsonPath": self.json_path}


AGE = Column("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class Resource:
    """One custom resource of radixfleet's: its spec type and what the CRD adds around it.

    `status` is the status subresource's schema (data: the controllers' status types are not
    pydantic models); `metadata` narrows the object's metadata (a Tenant's name)."""

    group: str
    version: str
    names: Names
    scope: str
    spec: type[BaseModel]
    descriptions: Mapping[str, str]
    status: Schema
    columns: Sequence[Column]
    metadata: Schema = field(default_factory=lambda: {"type": "object"})


def definition(resource: Resource) -> Schema:
    """The CustomResourceDefinition of `resource`, as the API server takes it."""
    version: Schema = {
        "name": resource.version,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [c.as_spec() for c in resource.columns],
        "schema": {"openAPIV3Schema": _root(resource)},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.names.plural}.{resource.group}", "labels": MANAGED_BY},
        "spec": {
            "group": resource.group,
            "scope": resource.scope,
            "names": resource.names.as_spec(),
            "versions": [version],
        },
    }


def _root(resource: Resource) -> Schema:
    spec = describe(structural_schema(resource.spec), resource.descriptions)
    spec = {"type": "object", **{k: v for k, v in spec.items() if k != "type"}}
    root = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": resource.metadata,
            "spec": spec,
            "status": resource.status,
        },
    }
    found: Schema = ordered(root)
    return found


def ordered(node: Any) -> Any:
    """`node` with each schema's keys in the order a reader expects (type first, sub-schemas
    last); the same mapping to the API server. Fields keep their own order."""
    if isinstance(node, list):
        return [ordered(n) for n in node]
    if not isinstance(node, dict):
        return node
    keys = sorted(node, key=lambda k: (_RANK.get(k, len(_RANK)), k in _NESTED))
    return {k: _ordered_value(k, node[k]) for k in keys}


def _ordered_value(key: str, value: Any) -> Any:
    if key == "properties":  # field names, each naming a schema
        return {name: ordered(sub) for name, sub in value.items()}
    return value if key in ("default", "enum") else ordered(value)


_NESTED = frozenset({"items", "additionalProperties", "properties"})
_RANK = {key: i for i, key in enumerate(_KEY_ORDER)}


def data(package: str, name: str) -> Any:
    """A YAML document shipped in `package` (a status schema, kopf's peering CRD)."""
    return yaml.safe_load(resources.files(package).joinpath(name).read_text(encoding="utf-8"))


def kopf_peering() -> Schema:
    """kopf's ClusterKopfPeering CRD (leader election, `radixfleet.kit.leader`): kopf's schema,
    not generated from a type of ours, so kept as data beside the kit."""
    found: Schema = data("radixfleet.kit", "clusterkopfpeerings.kopf.dev.yaml")
    return found
