"""A custom resource's status as the API server stores it: camelCase, and no nulls.

radixfleet's CRD schemas declare no field nullable, so a status written with `null` (or a NaN,
which JSON cannot carry) is refused; every controller writes its status through this one
function.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel


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
