"""The CanaryPolicy's spec as a type: every field, default and limit of a rollout, in one place.

The CRD (`crd.py`, rendered to `deploy/crds/`) is generated from this type, so the API server
fills in these defaults and holds the same bounds; what only the API server checks (CEL rules,
list types) is carried here as schema metadata that changes no parsing. The decision layer
reads only this type.

How an InferenceService uses a policy: it names a CanaryPolicy of its own namespace in the
annotation `radixfleet.io/canary-policy`, and carries `spec.predictor.canaryTrafficPercent: 0`
in its manifest so that KServe pins every new predictor revision at 0% until the controller
steps it (without the field KServe sends 100% to a new revision as soon as it is ready).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from radixfleet.kit.crd import Crd
from radixfleet.labels import CANARY_POLICY, GROUP

API_VERSION = "v1alpha1"
KIND = "CanaryPolicy"
PLURAL = "canarypolicies"

# On an InferenceService: the name of the CanaryPolicy that carries its rollouts.
POLICY_ANNOTATION = CANARY_POLICY

# The platform team's commands live on the CanaryPolicy, keyed by InferenceService, not on the
# InferenceService: KServe copies an InferenceService's annotations into the Knative revision
# template, so annotating it mid-rollout would create a new revision and restart the rollout.
COMMAND_PREFIX = f"canary.{GROUP}"
PAUSE_PREFIX = f"pause.{COMMAND_PREFIX}"  # value "true": hold the rollout where it is
APPROVE_PREFIX = f"approve.{COMMAND_PREFIX}"  # value "REVISION@WEIGHT": pass a manual gate
PROMOTE_PREFIX = f"promote.{COMMAND_PREFIX}"  # value "REVISION": promote now
ABORT_PREFIX = f"abort.{COMMAND_PREFIX}"  # value "REVISION": roll back now

MIN_INTERVAL_SECONDS = 10
# Validation context key lowering the floor of `intervalSeconds`, for the local fleet and tests:
# their Prometheus scrapes every second, where a cluster's 15-30 s scrape leaves a window under
# 10 s with one sample or none. Specs read from the cluster never get it.
MIN_INTERVAL_CONTEXT = "min_interval_seconds"
FULL_TRAFFIC = 100


def command_key(prefix: str, inference_service: str) -> str:
    """The annotation key on a CanaryPolicy that carries one command for one InferenceService."""
    return f"{prefix}/{inference_service}"


class Metric(StrEnum):
    """What a check judges. Latencies and the error rate are better lower, the hit rate higher."""

    TTFT_P95 = "ttftP95"
    ITL_P95 = "itlP95"
    ERROR_RATE = "errorRate"
    CACHE_HIT_RATE = "cacheHitRate"

    @property
    def higher_is_better(self) -> bool:
        return self is Metric.CACHE_HIT_RATE

    @property
    def is_fraction(self) -> bool:
        return self in (Metric.ERROR_RATE, Metric.CACHE_HIT_RATE)


class Spec(BaseModel):
    """Base of the spec types: camelCase on the wire as in the CRD, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class MetricCheck(Spec):
    """One limit on the canary, relative to the stable revision and/or absolute.

    For a lower-is-better metric the canary passes when
    `canary <= stable * relativeToStable + slack` and `canary <= limit`; for the cache hit rate
    when `canary >= stable * relativeToStable - slack` and `canary >= limit`. Latencies are in
    seconds, rates are fractions in 0..1. `slack` keeps a tiny stable value (no errors at all)
    from making any canary error a failure.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.relativeToStable) || has(self.limit)",
                    "message": "set relativeToStable, limit or both",
                },
                {
                    "rule": "!(self.metric in ['errorRate', 'cacheHitRate'])"
                    " || !has(self.limit) || self.limit <= 1.0",
                    "message": "the limit of a rate is a fraction in 0..1",
                },
            ]
        }
    )

    metric: Metric
    relative_to_stable: Annotated[float, Field(ge=0.01)] | None = None
    slack: Annotated[float, Field(ge=0)] = 0.0
    limit: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _has_a_limit(self) -> Self:
        if self.relative_to_stable is None and self.limit is None:
            raise ValueError(f"check {self.metric.value}: set relativeToStable, limit or both")
        if self.metric.is_fraction and self.limit is not None and self.limit > 1:
            raise ValueError(f"check {self.metric.value}: limit is a fraction in 0..1")
        return self

    @property
    def needs_stable(self) -> bool:
        return self.relative_to_stable is not None


def default_checks() -> list[MetricCheck]:
    """Judge latency relative to stable and errors by added error rate (a 5% canary fails)."""
    return [
        MetricCheck(metric=Metric.TTFT_P95, relative_to_stable=1.25),
        MetricCheck(metric=Metric.ITL_P95, relative_to_stable=1.25),
        MetricCheck(metric=Metric.ERROR_RATE, relative_to_stable=1.0, slack=0.01),
    ]


Weight = Annotated[int, Field(ge=1, le=FULL_TRAFFIC)]


def default_steps() -> list[int]:
    """5%, 20% and 50% judged, then promoted."""
    return [5, 20, 50, 100]


# A set has no repeats: the API server refuses a step or a gate given twice.
_WEIGHTS = {"maxItems": 20, "x-kubernetes-list-type": "set"}
_STEPS = Crd(
    {
        **_WEIGHTS,
        # Sorted on top of a set is strictly increasing.
        "x-kubernetes-validations": [
            {"rule": "self.isSorted()", "message": "steps must be strictly increasing"},
            {
                "rule": "self[0] < 100",
                "message": "at least one step must be below 100, where the canary is judged",
            },
        ],
    },
    default_from=default_steps,
)
_CHECKS = Crd(
    {"maxItems": 8, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["metric"]},
    default_from=default_checks,
)
_MANUAL_GATES_RULE = (
    "!has(self.manualGates) || !has(self.steps) || self.manualGates.all(g, g in self.steps)"
)


class CanaryPolicySpec(Spec):
    """How a new predictor revision is rolled out and judged.

    `steps` are the canaryTrafficPercent values in order; a canary that passes the analysis at
    the last step below 100 is promoted (KServe's field is removed), so a trailing 100 in
    `steps` only says so explicitly: with 100% on the canary the stable revision serves nothing
    and cannot be compared with. Defaults follow Flagger (interval 60 s, at least 10 s;
    progress deadline 600 s) except `threshold`, 2 rather than 1: one noisy interval of a p95
    on a few dozen requests should not roll back a good model. `baseline` asks for Kayenta's
    baseline: the stable model on as many replicas as the canary has, sent as much traffic.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": _MANUAL_GATES_RULE,
                    "message": "every manual gate must be one of the steps",
                }
            ]
        }
    )

    steps: Annotated[list[Weight], _STEPS] = Field(default_factory=default_steps, min_length=1)
    # At least MIN_INTERVAL_SECONDS, below (lowered only by a validation context, which the
    # API server never has: its floor is the cluster's).
    interval_seconds: Annotated[int, Field(ge=1), Crd({"minimum": MIN_INTERVAL_SECONDS})] = 60
    threshold: Annotated[int, Field(ge=1)] = 2
    min_requests: Annotated[int, Field(ge=1)] = 50
    # One-sided: only a canary worse than its stable revision fails (radixfleet/significance.py).
    significance: Annotated[float, Field(ge=0.0001, le=0.2)] = 0.05
    checks: Annotated[list[MetricCheck], _CHECKS] = Field(
        default_factory=default_checks, min_length=1
    )
    manual_gates: Annotated[list[Weight], Crd(_WEIGHTS, default_from=list)] = Field(
        default_factory=list
    )
    paused: bool = False
    progress_deadline_seconds: Annotated[int, Field(ge=MIN_INTERVAL_SECONDS)] = 600
    # Judge latency and hit rate against a baseline (radixfleet/controllers/canary/README.md) where
    # the fleet runs one.
    baseline: bool = False

    @classmethod
    def parse(
        cls, data: Mapping[str, Any], *, min_interval_seconds: int = MIN_INTERVAL_SECONDS
    ) -> CanaryPolicySpec:
        """A spec from its wire form, with a lower interval floor where scrapes are faster."""
        return cls.model_validate(data, context={MIN_INTERVAL_CONTEXT: min_interval_seconds})

    @field_validator("interval_seconds")
    @classmethod
    def _interval_floor(cls, value: int, info: ValidationInfo) -> int:
        floor = int((info.context or {}).get(MIN_INTERVAL_CONTEXT, MIN_INTERVAL_SECONDS))
        if value < floor:
            raise ValueError(f"intervalSeconds must be at least {floor}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if any(b <= a for a, b in zip(self.steps, self.steps[1:], strict=False)):
            raise ValueError(f"steps must be strictly increasing: {self.steps}")
        if self.steps[0] >= FULL_TRAFFIC:
            raise ValueError("steps need one weight below 100: the canary is judged there")
        if stray := sorted(set(self.manual_gates) - set(self.steps)):
            raise ValueError(f"manualGates {stray} are not among the steps {self.steps}")
        names = [check.metric for check in self.checks]
        if len(set(names)) != len(names):
            raise ValueError("at most one check per metric")
        return self

    @property
    def analysed_steps(self) -> list[int]:
        """The weights the canary is judged at: every step below 100."""
        return [step for step in self.steps if step < FULL_TRAFFIC]

    def next_step(self, weight: int) -> int:
        """The weight after `weight`; FULL_TRAFFIC means promote."""
        return next((s for s in self.analysed_steps if s > weight), FULL_TRAFFIC)
