"""A Tenant's status as a type: GPU accounts per type, counted InferenceServices, conditions.

The status is more than a report: the ValidatingAdmissionPolicy (`admission.py`) reads it as its
parameter. `gpus[TYPE].ceiling` is the most the tenant may commit of that type now (its
guaranteed GPUs plus what it may borrow), `gpus[TYPE].committed` what is committed, and
`commitments` what each InferenceService was counted for, so an update is checked against the
others only. Nothing here does I/O.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from radixfleet.wire import Wire


class GpuAccount(Wire):
    """One GPU type of one tenant: its budget, what it may borrow now, and what it committed."""

    guaranteed: int = Field(ge=0)
    borrow: int = Field(ge=0)
    borrowable: int = Field(ge=0)  # of `borrow`, what other tenants leave unused right now
    committed: int = Field(ge=0)

    @property
    def ceiling(self) -> int:
        return self.guaranteed + self.borrowable

    def to_wire(self) -> dict[str, Any]:
        return {**self.model_dump(by_alias=True), "ceiling": self.ceiling}


class Counted(Wire):
    """What one InferenceService was counted for."""

    gpu_type: str
    gpus: int = Field(ge=0)


class ConditionType(StrEnum):
    READY = "Ready"
    NAMESPACES_CLAIMED = "NamespacesClaimed"
    GPU_TYPES_KNOWN = "GpuTypesKnown"
    API_KEYS_RESOLVED = "ApiKeysResolved"
    WITHIN_BUDGET = "WithinBudget"


class Condition(Wire):
    """A Kubernetes-style condition; `last_transition_time` moves only when `status` flips."""

    type: ConditionType
    status: str  # "True" or "False", as Kubernetes spells them
    reason: str
    message: str = ""
    last_transition_time: datetime
    observed_generation: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "True"


class TenantStatus(Wire):
    """Everything the controller knows of one tenant, as written to `status`."""

    observed_generation: int = 0
    namespaces: list[str] = Field(default_factory=list)
    gpus: dict[str, GpuAccount] = Field(default_factory=dict)
    running_gpus: int = Field(default=0, ge=0)
    commitments: dict[str, Counted] = Field(default_factory=dict)
    api_keys: int = Field(default=0, ge=0)
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type is kind), None)

    def to_wire(self) -> dict[str, Any]:
        """As stored: camelCase, `ceiling` spelled out for the admission policy and kubectl."""
        wire = self.model_dump(mode="json", by_alias=True)
        wire["gpus"] = {gpu: account.to_wire() for gpu, account in self.gpus.items()}
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any] | None) -> TenantStatus | None:
        """The status as stored; None until the controller has accounted the tenant (the
        admission policy tells the two apart by `namespaces`, which every write carries)."""
        if not wire or "namespaces" not in wire:
            return None
        gpus = {
            gpu: {k: v for k, v in account.items() if k != "ceiling"}
            for gpu, account in (wire.get("gpus") or {}).items()
        }
        return cls.model_validate({**wire, "gpus": gpus})
