"""The CanaryPolicy type and its CRD: same defaults, same fields, the same specs refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from radixfleet.controllers.canary.spec import (
    API_VERSION,
    KIND,
    CanaryPolicySpec,
    Metric,
    MetricCheck,
)
from radixfleet.validate.crd_schema import to_json_schema

CRD_PATH = Path(__file__).parents[2] / "deploy/crds/canarypolicies.radixfleet.io.yaml"


def _crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD_PATH.read_text()))


def _version() -> dict[str, Any]:
    (version,) = _crd()["spec"]["versions"]
    return dict(version)


def _spec_schema() -> dict[str, Any]:
    return dict(_version()["schema"]["openAPIV3Schema"]["properties"]["spec"])


def _validate_as_the_validator_does(spec: dict[str, Any]) -> None:
    """Validate a whole CanaryPolicy with the JSON Schema `radixfleet validate` derives."""
    # The same translation `radixfleet validate` applies, without loading KServe's 2 MB of CRDs.
    schema = to_json_schema(_version()["schema"]["openAPIV3Schema"])
    doc = {"apiVersion": f"radixfleet.io/{API_VERSION}", "kind": KIND, "metadata": {}}
    jsonschema.Draft7Validator(schema).validate({**doc, "spec": spec})


def test_crd_names_match_the_type() -> None:
    crd = _crd()
    assert crd["spec"]["names"]["kind"] == KIND
    assert _version()["name"] == API_VERSION
    assert _version()["subresources"] == {"status": {}}


def test_crd_fields_are_the_types_fields() -> None:
    schema_fields = set(_spec_schema()["properties"])
    model_fields = {f.alias for f in CanaryPolicySpec.model_fields.values()}
    assert schema_fields == model_fields
    check_fields = set(_spec_schema()["properties"]["checks"]["items"]["properties"])
    assert check_fields == {f.alias for f in MetricCheck.model_fields.values()}


def test_crd_defaults_equal_the_types_defaults() -> None:
    defaults = {
        name: prop["default"]
        for name, prop in _spec_schema()["properties"].items()
        if "default" in prop
    }
    from_type = CanaryPolicySpec().model_dump(by_alias=True, mode="json", exclude_none=True)
    assert defaults == from_type


def test_an_empty_spec_gets_flagger_like_defaults() -> None:
    spec = CanaryPolicySpec.model_validate({})
    assert spec.interval_seconds == 60
    assert spec.progress_deadline_seconds == 600
    assert spec.analysed_steps == [5, 20, 50]
    assert [c.metric for c in spec.checks] == [Metric.TTFT_P95, Metric.ITL_P95, Metric.ERROR_RATE]


@pytest.mark.parametrize(
    ("weight", "expected"),
    [(0, 5), (5, 20), (20, 50), (50, 100), (99, 100)],
    ids=["start", "after-5", "after-20", "after-50-promotes", "past-the-steps"],
)
def test_next_step(weight: int, expected: int) -> None:
    assert CanaryPolicySpec().next_step(weight) == expected


GOOD = {
    "steps": [10, 50],
    "intervalSeconds": 30,
    "threshold": 3,
    "minRequests": 20,
    "manualGates": [50],
    "checks": [
        {"metric": "ttftP95", "relativeToStable": 1.5, "limit": 2.0},
        {"metric": "cacheHitRate", "relativeToStable": 0.8, "slack": 0.05},
        {"metric": "errorRate", "limit": 0.02},
    ],
}

BAD: dict[str, dict[str, Any]] = {
    "steps-not-increasing": {"steps": [20, 5]},
    "steps-repeat": {"steps": [5, 5, 50]},
    "step-zero": {"steps": [0, 50]},
    "step-over-100": {"steps": [5, 101]},
    "only-100": {"steps": [100]},
    "interval-under-10s": {"intervalSeconds": 5},
    "threshold-zero": {"threshold": 0},
    "gate-not-a-step": {"steps": [5, 50], "manualGates": [20]},
    "check-without-limit": {"checks": [{"metric": "ttftP95"}]},
    "rate-limit-over-1": {"checks": [{"metric": "errorRate", "limit": 5}]},
    "unknown-metric": {"checks": [{"metric": "gpuTemp", "limit": 80}]},
    "unknown-field": {"stepWeight": 10},
    "negative-ratio": {"checks": [{"metric": "itlP95", "relativeToStable": -1}]},
}


def test_a_good_spec_is_accepted_by_type_and_schema() -> None:
    spec = CanaryPolicySpec.model_validate(GOOD)
    assert spec.manual_gates == [50]
    _validate_as_the_validator_does(GOOD)


@pytest.mark.parametrize("body", BAD.values(), ids=BAD.keys())
def test_a_bad_spec_is_refused_by_the_type(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CanaryPolicySpec.model_validate(body)


# The CEL rules (order, gates, a limit per check) need the API server; jsonschema sees the rest.
SCHEMA_CATCHES = ["step-zero", "step-over-100", "interval-under-10s", "threshold-zero"]
SCHEMA_CATCHES += ["unknown-metric", "negative-ratio", "unknown-field", "only-100-needs-cel"]


@pytest.mark.parametrize("name", [n for n in SCHEMA_CATCHES if n in BAD])
def test_a_bad_spec_is_refused_by_the_schema(name: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _validate_as_the_validator_does(BAD[name])


def test_a_lower_interval_floor_is_only_given_on_request() -> None:
    # The local fleet's Prometheus scrapes every second; a cluster's spec never gets the floor.
    spec = CanaryPolicySpec.parse({"intervalSeconds": 3}, min_interval_seconds=1)
    assert spec.interval_seconds == 3
    with pytest.raises(ValidationError, match="at least 10"):
        CanaryPolicySpec.parse({"intervalSeconds": 3})
    with pytest.raises(ValidationError, match="at least 2"):
        CanaryPolicySpec.parse({"intervalSeconds": 1}, min_interval_seconds=2)
