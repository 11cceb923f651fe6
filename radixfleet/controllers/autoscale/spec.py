"""The AutoscalePolicy's spec as a type: every field, default and limit of a model's scaling.

One AutoscalePolicy scales one InferenceService of its own namespace, named in
`spec.inferenceService` (like an HPA's scaleTargetRef). The policy points at the model, not
the other way round: an annotation added to an existing InferenceService would be copied by
KServe into a new Knative revision, so adopting a policy would restart the model.

The CRD (`crd.py`, rendered to `deploy/crds/`) is generated from this type, so the API server
fills in these defaults; what only it checks (CEL rules, list types) is schema metadata here
that changes no parsing. The decision layer reads only this type.
"""

from __future__ import annotations

import re
from datetime import datetime, time
from enum import StrEnum
from typing import Annotated, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from radixfleet.kit.crd import Crd

API_VERSION = "v1alpha1"
KIND = "AutoscalePolicy"
PLURAL = "autoscalepolicies"

MIN_INTERVAL_SECONDS = 1
CLOCK = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
# The same clock for the API server, in ASCII digits (its `\d` may differ from Python's).
_CLOCK = Crd({"pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"})
# A nested object defaults to {}, so that the API server fills in its own fields' defaults.
_EMPTY = Crd({"default": {}})


class Spec(BaseModel):
    """Base of the spec types: camelCase on the wire as in the CRD, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


Fraction = Annotated[float, Field(ge=0.01, le=1)]
Replicas = Annotated[int, Field(ge=0, le=1000)]


class Slo(Spec):
    """Per-request objectives; a p95 over them pushes the model up (never down)."""

    ttft_p95_ms: Annotated[float, Field(ge=1)] = 1000.0
    itl_p95_ms: Annotated[float, Field(ge=1)] = 50.0


class Targets(Spec):
    """What one ready replica should carry, from SGLang's gauges.

    `kvUsage` is `sglang:token_usage` (KV tokens held by running requests over capacity;
    cached but unreferenced prefixes count as free): the signal of long-context load, which
    fills the KV cache before anything else. `queuePerReplica` is how many
    `sglang:num_queue_reqs` a replica may hold before the queue counts as demand.

    Running requests (`sglang:num_running_reqs`) are the signal of compute-bound load (short
    prompts fill the GPU's prefill and decode time long before its KV cache): a replica should
    run `runningPerReplica`, or, unset, `batchFraction` of the batch it was last seen to
    saturate at (running requests while its queue grew; learned per model). Queued requests
    count at the same price.

    The inter-token latency a replica gives its running requests is read from its gauges as
    `num_running_reqs / gen_throughput` (seconds per token per request), long before the
    latency histograms of finished requests show it: the fleet aims at `itlFraction` of the ITL
    SLO. Decode time grows like a queue's, `floor / (1 - utilisation)`, where `itlFloorMs` is
    the step time of an empty batch (the profile's decode overhead; unset, the lowest estimate
    seen, at most a quarter of the aim). The aim sits well under the SLO because the SLO holds
    per request and requests' mean latencies spread around the fleet's. A change smaller than
    `tolerance` (relative to the current count) is ignored, so noise around a target moves
    nothing; it is small because near saturation a few percent of replicas is a large change
    of latency.
    """

    kv_usage: Fraction = 0.7
    queue_per_replica: Annotated[float, Field(ge=0)] = 2.0
    running_per_replica: Annotated[float, Field(ge=1)] | None = None
    batch_fraction: Fraction = 0.8
    itl_fraction: Fraction = 0.7
    itl_floor_ms: Annotated[float, Field(ge=0.1)] | None = None
    tolerance: Annotated[float, Field(ge=0, le=0.5)] = 0.05


class ScaleUp(Spec):
    """Scale-up behaviour: act on the lowest recommendation of the window.

    A short window (two ticks) lets one noisy reading pass (a replica that has just joined
    reports a throughput averaged over time it was not serving) at the cost of seconds against
    a cold start of a minute; a model at zero wakes at once. One tick adds at most
    `max(current x maxRate, current + minStep) - current` replicas.
    """

    stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 20
    max_rate: Annotated[float, Field(ge=1.01, le=1000)] = 2.0
    min_step: Annotated[int, Field(ge=1, le=1000)] = 4


class ScaleDown(Spec):
    """Scale-down behaviour: act on the highest recommendation of the window, step by step.

    A long window is what keeps a noisy signal from flapping, and each removal throws away a
    warm prefix cache, so the default waits five minutes (the HPA's default too). Twice the cold
    start (120 s in the twin) was measured and not kept: it saved GPU-hours where the load is
    steady or comes in one burst (45 req/s on the Azure trace 2.35 -> 2.15, two-minute bursts
    5.78 -> 4.01, at the same attainment), but `benchmarks/prewarm_twin.py`'s long contexts
    fell from 99.98% to 91.8% SLO attainment (GPU-hours 0.86 -> 1.56; median of three seeds;
    240 s still 92.1%), and so did keeping a new autoscaler's starting count for twice the cold
    start instead of the window (2.35 -> 2.15 at 45 req/s). Why, looked at: that shape's load
    triples 240 s in; a shorter hold has gone down to one replica by then, and the step waits a
    cold start on it. Today's rules meet the same step at 360 s with one replica too (95.3%),
    so what it asks for is a faster answer to a step, not a longer window. Then at most
    `maxFraction` of the replicas (at least one) go per `periodSeconds`: a signal that
    under-reads the load (KV usage of a compute-bound model) meets the queue on the way down
    instead of at the bottom.

    The window's recommendations are read as their means over `smoothingSeconds` (rounded
    up): the HPA's come from metrics already averaged over a minute, ours from gauges read at
    one instant, and the highest of thirty instants is the noise's peak, not the load (on the
    Azure trace at 45 req/s it cost 9% more GPU-hours at the same SLO). A count reached by a
    scale-up stays for the whole window all the same. 0 reads each tick's as it is; the span
    is at most the window.
    """

    stabilization_seconds: Annotated[int, Field(ge=0, le=7200)] = 300
    smoothing_seconds: Annotated[int, Field(ge=0, le=600)] = 60
    max_fraction: Fraction = 0.25
    period_seconds: Annotated[int, Field(ge=0, le=3600)] = 30


class Day(StrEnum):
    MON = "Mon"
    TUE = "Tue"
    WED = "Wed"
    THU = "Thu"
    FRI = "Fri"
    SAT = "Sat"
    SUN = "Sun"


ALL_DAYS = tuple(Day)


def _all_days() -> list[Day]:
    return list(ALL_DAYS)


class ScheduleWindow(Spec):
    """A warm floor for part of the day: `minReplicas` from `start` to `end` (HH:MM).

    An `end` at or before `start` wraps past midnight; `days` name the day the window starts.
    """

    start: Annotated[str, _CLOCK]
    end: Annotated[str, _CLOCK]
    min_replicas: Replicas
    days: Annotated[list[Day], Crd({"x-kubernetes-list-type": "set"}, default_from=_all_days)] = (
        Field(default_factory=_all_days, min_length=1)
    )

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        if not CLOCK.match(value):
            raise ValueError(f"{value!r} is not a 24-hour HH:MM time")
        return value

    def covers(self, local: datetime) -> bool:
        """Whether the window holds at `local` (a time in the policy's time zone)."""
        start, end, now = _clock(self.start), _clock(self.end), local.time()
        today = ALL_DAYS[local.weekday()]
        if start < end:
            return today in self.days and start <= now < end
        yesterday = ALL_DAYS[(local.weekday() - 1) % 7]
        return (today in self.days and now >= start) or (yesterday in self.days and now < end)


def _clock(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


class Predictive(Spec):
    """Scale for the load expected once a new replica is ready, from recent arrival rates.

    The arrival rate divided by what one replica serves at the targets (`replicaRps`, else
    learned from the rate and the signals while the fleet is within its targets) is a demand of
    its own: it keeps its proportion when the gauges saturate in a burst, and at zero. When
    `enabled`, the rate's rise over `lookbackSeconds`, one cold start ahead, scales the demand
    by as much; `headroom` multiplies that prediction.
    """

    enabled: bool = True
    lookback_seconds: Annotated[int, Field(ge=30, le=3600)] = 300
    headroom: Annotated[float, Field(ge=1, le=10)] = 1.0
    replica_rps: Annotated[float, Field(ge=0.001)] | None = None


class WarmPool(Spec):
    """Replicas kept ready ahead of demand: a floor by time of day, and a predicted one."""

    schedule: Annotated[list[ScheduleWindow], Crd(default_from=list)] = Field(
        default_factory=list, max_length=32
    )
    time_zone: str = "UTC"
    predictive: Annotated[Predictive, _EMPTY] = Field(default_factory=Predictive)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as error:
            raise ValueError(f"unknown time zone {value!r}") from error
        return value

    def floor(self, now: datetime) -> int:
        """The schedule's floor at `now` (an aware datetime): the largest window that holds."""
        local = now.astimezone(ZoneInfo(self.time_zone))
        return max((w.min_replicas for w in self.schedule if w.covers(local)), default=0)


class ColdStart(Spec):
    """What a cold start costs and how many requests may pay for it.

    `seconds` is how long a new replica takes to serve (CALIBRATION: 45-90 s with weights on
    the node, more from S3 or on a new node): the predictive forecast looks that far ahead.
    `budget` is the share of requests that may wait on a cold start (arrive while no replica
    is ready), counted over `memorySeconds`: while it is spent, the model keeps one replica
    rather than going to zero. `missCostSeconds` prices a request that waits on a cold start in
    replica-seconds: with the cold start's own GPU time it is what a trip to zero costs, which
    the idle gaps the model has had must repay (`memory.break_even`); with
    `learnIdleWindow` false the model always waits `idleSeconds` instead.
    """

    seconds: Annotated[float, Field(ge=0, le=3600)] = 90.0
    budget: Annotated[float, Field(ge=0, le=1)] = 0.01
    memory_seconds: Annotated[int, Field(ge=60, le=7 * 86400)] = 3600
    miss_cost_seconds: Annotated[float, Field(ge=0, le=3600)] = 2.0
    learn_idle_window: bool = True


class Prewarm(Spec):
    """Warm a new replica's prefix cache before it takes traffic
    (`radixfleet/controllers/autoscale/prewarm`).

    The gateway's view of the prompts it routed gives the prefixes most requests began with;
    the hottest fill up to `kvFraction` of the new replica's KV cache, each prefix seen at
    least `minHits` times recently. The replica is held back only while other replicas of its
    revision serve, no request waits for a replica and their queues stay within
    `targets.queuePerReplica` each, and never past `deadlineSeconds`.
    """

    enabled: bool = True
    kv_fraction: Fraction = 0.8
    min_hits: Annotated[int, Field(ge=1, le=1000)] = 2
    deadline_seconds: Annotated[float, Field(ge=0, le=600)] = 30.0


class AutoscalePolicySpec(Spec):
    """How one InferenceService is scaled. See the module docstring and
    radixfleet/controllers/autoscale."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.minReplicas) || !has(self.maxReplicas)"
                    " || self.minReplicas <= self.maxReplicas",
                    "message": "minReplicas must not be above maxReplicas",
                }
            ]
        }
    )

    inference_service: Annotated[str, Field(min_length=1, max_length=253)]
    min_replicas: Replicas = 0
    max_replicas: Annotated[int, Field(ge=1, le=1000)] = 8
    interval_seconds: Annotated[int, Field(ge=MIN_INTERVAL_SECONDS, le=600)] = 10
    slo: Annotated[Slo, _EMPTY] = Field(default_factory=Slo)
    targets: Annotated[Targets, _EMPTY] = Field(default_factory=Targets)
    scale_up: Annotated[ScaleUp, _EMPTY] = Field(default_factory=ScaleUp)
    scale_down: Annotated[ScaleDown, _EMPTY] = Field(default_factory=ScaleDown)
    idle_seconds: Annotated[int, Field(ge=10, le=7 * 86400)] = 600
    warm_pool: Annotated[WarmPool, _EMPTY] = Field(default_factory=WarmPool)
    cold_start: Annotated[ColdStart, _EMPTY] = Field(default_factory=ColdStart)
    cache_aware_drain: bool = True
    prewarm: Annotated[Prewarm, _EMPTY] = Field(default_factory=Prewarm)
    paused: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}"
            )
        return self
