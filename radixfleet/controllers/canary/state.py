"""What the decision layer reads and writes: the observed world and a rollout's status.

`RolloutStatus` is one entry of a CanaryPolicy's `status.rollouts`, keyed by InferenceService;
it is everything a restarted controller needs to resume mid-rollout. `Observed` is a snapshot
the controller assembles from the InferenceService, Prometheus and the policy's command
annotations. Neither does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from radixfleet.controllers.canary.spec import (
    ABORT_PREFIX,
    APPROVE_PREFIX,
    PAUSE_PREFIX,
    PROMOTE_PREFIX,
    Metric,
    command_key,
)
from radixfleet.revisions import FIELD_OF, Measured, RevisionMetrics
from radixfleet.wire import LastDecision as _LastDecision
from radixfleet.wire import Wire, finite

__all__ = [
    "FIELD_OF",
    "CheckResult",
    "LastDecision",
    "Manual",
    "Measured",
    "Observed",
    "Phase",
    "RevisionMetrics",
    "RolloutStatus",
    "Verb",
    "Wire",
    "finite",
    "read_manual",
    "rollout_of",
]


class Phase(StrEnum):
    """Where a rollout is. Promoted and RolledBack are final for their canary revision."""

    WAITING = "Waiting"  # the canary revision is not ready yet
    PROGRESSING = "Progressing"
    HALTED = "Halted"  # metrics cannot be judged; nothing moves until they can
    PAUSED = "Paused"
    AWAITING_APPROVAL = "AwaitingApproval"
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"

    @property
    def final(self) -> bool:
        return self in (Phase.PROMOTED, Phase.ROLLED_BACK)


class Verb(StrEnum):
    """The kind of a decision. Only advance, promote and rollback move traffic."""

    ADVANCE = "advance"
    HOLD = "hold"
    HALT = "halt"
    PROMOTE = "promote"
    ROLLBACK = "rollback"


#: The latest decision of a rollout, as the platform team reads it in `canary status`.
LastDecision = _LastDecision[Verb]


class CheckResult(Wire):
    """One check's verdict with the numbers behind it.

    A check beyond its relative bound fails only when the difference is significant
    (`p_value` below the policy's `significance`); otherwise it is `inconclusive`, and the
    rollout halts for more data rather than rolling back a good model on noise.
    """

    metric: Metric
    passed: bool
    canary: float
    stable: float | None = None
    bound: float
    p_value: float | None = None
    inconclusive: bool = False


class BaselineStatus(Wire):
    """The baseline beside a rollout: the stable revision it is made of, its replicas ready.
    The region entry reads it to send the baseline the canary's share (once one is ready)."""

    revision: str
    ready: int = Field(ge=0)


class RolloutStatus(Wire):
    """The progress of one InferenceService's rollout of one canary revision."""

    inference_service: str
    canary_revision: str
    stable_revision: str | None = None
    phase: Phase
    weight: int = Field(ge=0, le=100)
    failed_checks: int = Field(default=0, ge=0)
    started_at: datetime
    last_progress_at: datetime
    last_analysis_at: datetime | None = None
    last_decision: LastDecision | None = None
    measured: Measured | None = None
    checks: tuple[CheckResult, ...] = ()
    baseline: BaselineStatus | None = None

    @property
    def passed_last_analysis(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


@dataclass(frozen=True)
class Manual:
    """The platform team's commands for the current canary revision."""

    paused: bool = False
    approved_weight: int | None = None
    promote: bool = False
    abort: bool = False


@dataclass(frozen=True)
class Observed:
    """One snapshot of an InferenceService under a policy, as the decision layer sees it.

    `canary_revision` is KServe's latest created predictor revision when it differs from the
    latest rolled-out one, else None (nothing to roll out). `weight` is the current
    `canaryTrafficPercent`, None when the field is absent. `measured` is None when nothing was
    measured (analysis not due, or Prometheus failed: then `metrics_error` says why).
    """

    inference_service: str
    canary_revision: str | None
    stable_revision: str | None
    canary_ready: bool
    weight: int | None
    measured: Measured | None = None
    metrics_error: str | None = None
    manual: Manual = field(default_factory=Manual)


def read_manual(
    annotations: Mapping[str, str], *, inference_service: str, canary_revision: str
) -> Manual:
    """The commands on a CanaryPolicy that apply to this InferenceService's current canary.

    Promote, abort and approve name the revision they are for, so a command left behind from
    an earlier rollout never acts on a later one.
    """

    def value(prefix: str) -> str:
        return annotations.get(command_key(prefix, inference_service), "").strip()

    return Manual(
        paused=value(PAUSE_PREFIX).lower() == "true",
        approved_weight=_approved_weight(value(APPROVE_PREFIX), canary_revision),
        promote=value(PROMOTE_PREFIX) == canary_revision,
        abort=value(ABORT_PREFIX) == canary_revision,
    )


def _approved_weight(value: str, canary_revision: str) -> int | None:
    revision, _, weight = value.rpartition("@")
    if revision != canary_revision or not weight.isdigit():
        return None
    return int(weight)


def rollout_of(policy: Mapping[str, Any], inference_service: str) -> RolloutStatus | None:
    """The recorded rollout of one InferenceService in a policy's status, if any."""
    for entry in (policy.get("status") or {}).get("rollouts", []):
        if entry.get("inferenceService") == inference_service:
            return RolloutStatus.model_validate(entry)
    return None
