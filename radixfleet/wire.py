"""A custom resource's status as the API server stores it, and the base types of every status.

`Wire` is the base of the controllers' status types: camelCase as stored in the CR, immutable in
memory. radixfleet's CRD schemas declare no field nullable, so a status written with `null` (or
a NaN, which JSON cannot carry) is refused; every controller writes its status through
`status_to_wire`. `LastDecision` is the latest decision of a controller whose decisions have a
verb (canary, autoscale); `finite` is the one reading of "a usable number".
"""

from __future__ import annotations

import math
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

VerbT = TypeVar("VerbT", bound=StrEnum)


class Wire(BaseModel):
    """Base of the status types: camelCase as stored in the CR, immutable in memory."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class LastDecision(Wire, Generic[VerbT]):
    """The latest decision and why, as the platform team reads it in `radixfleet ... status`."""

    action: VerbT
    reason: str
    at: datetime


def finite(value: float | None) -> float | None:
    """`value` if it is a usable number; NaN and infinities count as missing."""
    return value if value is not None and math.isfinite(value) else None


def status_to_wire(status: BaseModel) -> dict[str, Any]:
    """`status` dumped by alias, with None and non-finite floats left out at every depth."""
    return dict(_prune(status.model_dump(mode="json", by_alias=True)))


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if not _missing(v)}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))
