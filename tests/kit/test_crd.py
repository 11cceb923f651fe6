"""The CRD generator (radixfleet/kit/crd.py): a pydantic model to a structural schema, and a
description by path. The CRDs it makes are held by tests/test_render_crds.py (deploy/crds/)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field

from radixfleet.kit.crd import Crd, describe, structural_schema
from radixfleet.kit.plugin import resolve
from radixfleet.kit.registry import plugins


class Inner(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"x-kubernetes-validations": [{"rule": "true", "message": "m"}]},
    )

    count: Annotated[int, Field(gt=0)] = 1


class Outer(BaseModel):
    """A docstring for Python readers only."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1)]
    inner: Annotated[Inner, Crd({"default": {}})] = Field(default_factory=Inner)
    maybe: Annotated[float, Field(ge=0.5)] | None = None
    tags: Annotated[list[str], Crd({"x-kubernetes-list-type": "set"}, default_from=list)] = Field(
        default_factory=list
    )


def test_a_model_becomes_a_structural_schema() -> None:
    assert structural_schema(Outer) == {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "inner": {
                "type": "object",
                "default": {},
                "x-kubernetes-validations": [{"rule": "true", "message": "m"}],
                # An integer's exclusive bound is the next integer.
                "properties": {"count": {"type": "integer", "minimum": 1, "default": 1}},
            },
            "maybe": {"type": "number", "minimum": 0.5},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "default": [],
                "x-kubernetes-list-type": "set",
            },
        },
    }


def test_a_numbers_exclusive_bound_needs_a_cel_rule_to_say_so() -> None:
    class Rate(BaseModel):
        value: Annotated[float, Field(gt=0)]

    with pytest.raises(ValueError, match="needs a CEL rule"):
        structural_schema(Rate)


def test_a_field_of_two_types_is_refused() -> None:
    class Either(BaseModel):
        value: int | str

    with pytest.raises(ValueError, match="one type per field"):
        structural_schema(Either)


def test_descriptions_go_by_path_and_a_missing_field_is_an_error() -> None:
    schema = structural_schema(Outer)
    described = describe(schema, {"": "root", "inner.count": "how many", "tags[]": "a tag"})
    assert described["description"] == "root"
    assert described["properties"]["inner"]["properties"]["count"]["description"] == "how many"
    assert described["properties"]["tags"]["items"]["description"] == "a tag"
    assert "description" not in schema  # the schema given is left as it was
    with pytest.raises(KeyError, match="renamed"):
        describe(schema, {"inner.renamed": "gone"})


def test_every_plugin_with_a_custom_resource_names_its_crd() -> None:
    for plugin in plugins():
        assert (plugin.crd is None) == (plugin.plural is None), plugin.name
        if plugin.crd is not None:
            assert resolve(plugin.crd)()["spec"]["names"]["plural"] == plugin.plural
