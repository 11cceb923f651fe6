"""The AutoscalePolicy type and its CRD: the same fields, the same defaults, the same refusals."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from radixfleet.controllers.autoscale.decide import decide
from radixfleet.controllers.autoscale.demand import ITL_TICKS
from radixfleet.controllers.autoscale.spec import (
    API_VERSION,
    KIND,
    PLURAL,
    AutoscalePolicySpec,
    ScheduleWindow,
    WarmPool,
)
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    BreakEven,
    ColdStarts,
    Demand,
    LastDecision,
    Learned,
    Observed,
    ReplicaMetrics,
    to_wire,
)
from radixfleet.validate.crd_schema import to_json_schema

CRD_PATH = Path(__file__).parents[2] / "deploy/crds/autoscalepolicies.radixfleet.io.yaml"


def _version() -> dict[str, Any]:
    (version,) = yaml.safe_load(CRD_PATH.read_text())["spec"]["versions"]
    return dict(version)


def _spec_schema() -> dict[str, Any]:
    return dict(_version()["schema"]["openAPIV3Schema"]["properties"]["spec"])


def _default(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: fill, then descend into what exists."""
    if isinstance(value, dict) and "properties" in schema:
        for name, prop in schema["properties"].items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = _default(prop, value[name])
    if isinstance(value, list) and "items" in schema:
        return [_default(schema["items"], item) for item in value]
    return value


def _validate(spec: dict[str, Any]) -> None:
    schema = to_json_schema(_version()["schema"]["openAPIV3Schema"])
    doc = {"apiVersion": f"radixfleet.io/{API_VERSION}", "kind": KIND, "metadata": {}}
    jsonschema.Draft7Validator(schema).validate({**doc, "spec": spec})


def _aliases(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def test_crd_names_match_the_type() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    assert crd["spec"]["names"]["kind"] == KIND
    assert crd["spec"]["names"]["plural"] == PLURAL
    assert _version()["name"] == API_VERSION
    assert _version()["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ((), AutoscalePolicySpec),
        (("warmPool",), WarmPool),
        (("warmPool", "schedule", "items"), ScheduleWindow),
    ],
    ids=["spec", "warmPool", "schedule"],
)
def test_crd_fields_are_the_types_fields(path: tuple[str, ...], model: type[BaseModel]) -> None:
    schema = _spec_schema()
    for key in path:
        schema = schema[key] if key == "items" else schema["properties"][key]
    assert set(schema["properties"]) == _aliases(model)


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ((), AutoscaleStatus),
        (("learned",), Learned),
        (("cold",), ColdStarts),
        (("breakEven",), BreakEven),
        (("demand",), Demand),
        (("lastDecision",), LastDecision),
    ],
    ids=["status", "learned", "cold", "breakEven", "demand", "lastDecision"],
)
def test_crd_status_fields_are_the_types_fields(
    path: tuple[str, ...], model: type[BaseModel]
) -> None:
    """The API server prunes a status field its schema lacks: the controller would forget it
    at every restart without an error."""
    schema = _version()["schema"]["openAPIV3Schema"]["properties"]["status"]
    for key in path:
        schema = schema["properties"][key]
    assert set(schema["properties"]) == _aliases(model)


def test_a_status_after_busy_ticks_is_one_the_crd_accepts() -> None:
    """The API server refuses a status write past a list's `maxItems` (422)."""
    busy = Observed(
        ready=2,
        revision="llama-00001",
        arrival_rate=10.0,
        replicas=tuple(
            ReplicaMetrics(f"pod-{i}", 20.0, 9.0, 0.5, gen_throughput=1000.0) for i in range(2)
        ),
    )
    status, start = None, datetime(2026, 11, 27, tzinfo=UTC)
    for tick in range(40):
        status = decide(
            busy,
            AutoscalePolicySpec(inference_service="llama"),
            status,
            start + timedelta(seconds=10 * tick),
        ).status
    assert status is not None and len(status.itl_estimates) == ITL_TICKS
    schema = to_json_schema(_version()["schema"]["openAPIV3Schema"]["properties"]["status"])
    jsonschema.Draft7Validator(schema).validate(to_wire(status))


def test_crd_defaults_equal_the_types_defaults() -> None:
    defaulted = _default(_spec_schema(), {"inferenceService": "llama"})
    typed = AutoscalePolicySpec(inference_service="llama")
    assert defaulted == typed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert AutoscalePolicySpec.model_validate(defaulted) == typed


def test_schedule_defaults_equal_the_types_defaults() -> None:
    window = {"start": "08:00", "end": "18:00", "minReplicas": 2}
    spec = {"inferenceService": "llama", "warmPool": {"schedule": [window]}}
    defaulted = _default(_spec_schema(), spec)
    typed = AutoscalePolicySpec.model_validate(spec)
    assert defaulted == typed.model_dump(mode="json", by_alias=True, exclude_none=True)


BAD_SPECS = {
    "no target": {},
    "min above max": {"inferenceService": "m", "minReplicas": 5, "maxReplicas": 2},
    "kv target above 1": {"inferenceService": "m", "targets": {"kvUsage": 1.5}},
    "bad clock": {
        "inferenceService": "m",
        "warmPool": {"schedule": [{"start": "8am", "end": "18:00", "minReplicas": 1}]},
    },
    "unknown field": {"inferenceService": "m", "cooldown": 5},
    "scale-up rate of 1": {"inferenceService": "m", "scaleUp": {"maxRate": 1.0}},
    "interval too short": {"inferenceService": "m", "intervalSeconds": 0},
}


@pytest.mark.parametrize("spec", BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_the_type_refuses(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AutoscalePolicySpec.model_validate(spec)


# The schema cannot see "min above max" (a CEL rule; the API-server tests cover it).
SCHEMA_REFUSES = {k: v for k, v in BAD_SPECS.items() if k != "min above max"}


@pytest.mark.parametrize("spec", SCHEMA_REFUSES.values(), ids=SCHEMA_REFUSES.keys())
def test_the_crd_schema_refuses(spec: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _validate(spec)


def test_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ValidationError, match="time zone"):
        WarmPool(time_zone="Mars/Olympus")


SCHEDULE_CASES = [
    # (window, local time, covers)
    (("08:00", "18:00", ["Mon"]), "2026-03-02T08:00", True),  # a Monday, at the start
    (("08:00", "18:00", ["Mon"]), "2026-03-02T18:00", False),  # the end is exclusive
    (("08:00", "18:00", ["Mon"]), "2026-03-03T09:00", False),  # Tuesday
    (("22:00", "06:00", ["Fri"]), "2026-03-06T23:00", True),  # Friday night
    (("22:00", "06:00", ["Fri"]), "2026-03-07T05:59", True),  # Saturday morning, Friday's
    (("22:00", "06:00", ["Fri"]), "2026-03-08T05:00", False),  # Sunday morning: Saturday's
]


@pytest.mark.parametrize(("window", "local", "covers"), SCHEDULE_CASES)
def test_schedule_windows(window: tuple[str, str, list[str]], local: str, covers: bool) -> None:
    start, end, days = window
    spec = ScheduleWindow.model_validate(
        {"start": start, "end": end, "days": days, "minReplicas": 1}
    )
    assert spec.covers(datetime.fromisoformat(local)) is covers


def test_schedule_floor_is_read_in_the_policy_time_zone() -> None:
    pool = WarmPool.model_validate(
        {
            "timeZone": "Asia/Tokyo",
            "schedule": [{"start": "09:00", "end": "17:00", "minReplicas": 3}],
        }
    )
    assert pool.floor(datetime(2026, 3, 2, 1, 0, tzinfo=UTC)) == 3  # 10:00 in Tokyo
    assert pool.floor(datetime(2026, 3, 2, 9, 0, tzinfo=UTC)) == 0  # 18:00 in Tokyo
