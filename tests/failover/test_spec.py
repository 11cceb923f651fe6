"""The FailoverPolicy type and its CRD: same defaults, same fields, the same specs refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from radixfleet.controllers.failover.spec import (
    API_VERSION,
    KIND,
    PLURAL,
    Failback,
    FailoverPolicySpec,
    Prescale,
    Region,
    Signals,
)
from radixfleet.validate.crd_schema import to_json_schema

CRD_PATH = Path(__file__).parents[2] / "deploy/crds/failoverpolicies.radixfleet.io.yaml"

MINIMAL: dict[str, Any] = {
    "hostedZoneId": "Z0123456789EXAMPLE",
    "recordName": "llama.models.example.com",
    "models": ["llama"],
    "regions": [{"name": "us-east-1"}, {"name": "eu-west-1"}],
}


def _crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD_PATH.read_text()))


def _version() -> dict[str, Any]:
    (version,) = _crd()["spec"]["versions"]
    return dict(version)


def _spec_schema() -> dict[str, Any]:
    return dict(_version()["schema"]["openAPIV3Schema"]["properties"]["spec"])


def _validate_as_the_validator_does(spec: dict[str, Any]) -> None:
    schema = to_json_schema(_version()["schema"]["openAPIV3Schema"])
    doc = {"apiVersion": f"radixfleet.io/{API_VERSION}", "kind": KIND, "metadata": {}}
    jsonschema.Draft7Validator(schema).validate({**doc, "spec": spec})


def _aliases(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def _defaults(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: p["default"] for k, p in schema["properties"].items() if "default" in p}


def _dump(value: BaseModel) -> dict[str, Any]:
    return value.model_dump(by_alias=True, mode="json", exclude_none=True)


def test_crd_names_match_the_type() -> None:
    crd = _crd()
    assert crd["spec"]["names"]["kind"] == KIND
    assert crd["spec"]["names"]["plural"] == PLURAL
    assert _version()["name"] == API_VERSION
    assert _version()["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ((), FailoverPolicySpec),
        (("signals",), Signals),
        (("failback",), Failback),
        (("prescale",), Prescale),
        (("regions", "items"), Region),
    ],
    ids=["spec", "signals", "failback", "prescale", "region"],
)
def test_crd_fields_are_the_types_fields(path: tuple[str, ...], model: type[BaseModel]) -> None:
    schema = _spec_schema()
    for key in path:
        schema = schema[key] if key == "items" else schema["properties"][key]
    assert set(schema["properties"]) == _aliases(model)


def test_crd_defaults_equal_the_types_defaults() -> None:
    spec = FailoverPolicySpec.model_validate(MINIMAL)
    from_type = {k: v for k, v in _dump(spec).items() if k not in MINIMAL}
    assert _defaults(_spec_schema()) == from_type
    region_schema = _spec_schema()["properties"]["regions"]["items"]
    assert _defaults(region_schema) == {"weight": Region(name="x").weight}
    for name, model in (("signals", Signals()), ("failback", Failback()), ("prescale", Prescale())):
        assert _defaults(_spec_schema()["properties"][name]) == _dump(model), name


def test_defaults_fail_fast_and_come_back_slowly() -> None:
    spec = FailoverPolicySpec.model_validate(MINIMAL)
    assert spec.interval_seconds * spec.unhealthy_after <= 30
    assert spec.healthy_after > spec.unhealthy_after
    assert spec.region("eu-west-1").record_id == "eu-west-1"
    assert [r.weight for r in spec.regions] == [100, 100]


GOOD: dict[str, Any] = {
    **MINIMAL,
    "recordType": "A",
    "models": ["llama", "qwen"],
    "regions": [
        {"name": "us-east-1", "weight": 200, "setIdentifier": "use1"},
        {"name": "eu-west-1", "weight": 0, "prometheusUrl": "http://prom.eu:9090"},
    ],
    "intervalSeconds": 15,
    "signals": {"maxErrorRate": 0.2, "ttftSloSeconds": 0.5, "useHealthChecks": False},
    "unhealthyAfter": 3,
    "healthyAfter": 10,
    "minHoldSeconds": 0,
    "failback": {"stepPercent": 50},
    "prescale": {"enabled": False},
}

BAD: dict[str, dict[str, Any]] = {
    "one-region": {**MINIMAL, "regions": [{"name": "us-east-1"}]},
    "no-models": {**MINIMAL, "models": []},
    "no-zone": {k: v for k, v in MINIMAL.items() if k != "hostedZoneId"},
    "weight-over-255": {**MINIMAL, "regions": [{"name": "a", "weight": 256}, {"name": "b"}]},
    "negative-weight": {**MINIMAL, "regions": [{"name": "a", "weight": -1}, {"name": "b"}]},
    "bad-region-name": {**MINIMAL, "regions": [{"name": "US_East"}, {"name": "b"}]},
    "interval-under-5s": {**MINIMAL, "intervalSeconds": 2},
    "unhealthy-after-0": {**MINIMAL, "unhealthyAfter": 0},
    "error-rate-over-1": {**MINIMAL, "signals": {"maxErrorRate": 2}},
    "objective-1": {**MINIMAL, "signals": {"ttftObjective": 1.0}},
    "slo-0": {**MINIMAL, "signals": {"ttftSloSeconds": 0}},
    "step-0": {**MINIMAL, "failback": {"stepPercent": 0}},
    "headroom-under-1": {**MINIMAL, "prescale": {"headroom": 0.5}},
    "unknown-field": {**MINIMAL, "ttl": 10},
    "record-type-mx": {**MINIMAL, "recordType": "MX"},
}

# Refused by the type and by CEL on the API server (tests/failover/test_crd.py), but not
# by the JSON Schema `radixfleet validate` derives, which does not run CEL.
CEL_ONLY = {"all-weights-0", "objective-1", "slo-0"}
TYPE_ONLY: dict[str, dict[str, Any]] = {
    "region-repeats": {**MINIMAL, "regions": [{"name": "a"}, {"name": "a"}]},
    "set-id-repeats": {
        **MINIMAL,
        "regions": [{"name": "a", "setIdentifier": "x"}, {"name": "b", "setIdentifier": "x"}],
    },
    "all-weights-0": {
        **MINIMAL,
        "regions": [{"name": "a", "weight": 0}, {"name": "b", "weight": 0}],
    },
}


def test_a_good_spec_is_accepted_by_type_and_schema() -> None:
    spec = FailoverPolicySpec.model_validate(GOOD)
    assert spec.region("us-east-1").record_id == "use1"
    assert spec.signals.max_error_rate == 0.2
    assert spec.signals.min_requests == Signals().min_requests
    _validate_as_the_validator_does(GOOD)


@pytest.mark.parametrize("body", [*BAD.values(), *TYPE_ONLY.values()], ids=[*BAD, *TYPE_ONLY])
def test_a_bad_spec_is_refused_by_the_type(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        FailoverPolicySpec.model_validate(body)


SCHEMA_BAD = {k: b for k, b in BAD.items() if k not in CEL_ONLY}


@pytest.mark.parametrize("body", SCHEMA_BAD.values(), ids=SCHEMA_BAD.keys())
def test_a_bad_spec_is_refused_by_the_schema(body: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _validate_as_the_validator_does(body)
