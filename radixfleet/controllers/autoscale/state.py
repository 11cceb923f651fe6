"""What the autoscaler's decision reads and writes: an observation and the scaling status.

`Observed` is one snapshot of a model's serving revision: its ready replicas with their SGLang
gauges, how many more are starting, the arrival rate, requests held upstream while no replica
could take them, and the latency p95s. `AutoscaleStatus` is what a restarted controller needs
to carry on where it was: the last desired count, the recommendations inside the stabilisation
windows, the recent arrival rates, what it has learned about one replica, when the model last
saw a request and how many requests waited on a cold start. Neither does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from radixfleet.wire import LastDecision as _LastDecision
from radixfleet.wire import Wire, status_to_wire
from radixfleet.wire import finite as finite  # the decision reads it from here


@dataclass(frozen=True)
class ReplicaMetrics:
    """One ready replica's gauges (None: missing or NaN in Prometheus).

    `cached_tokens_rate` is prompt tokens per second its prefix cache served recently
    (`rate(sglang:cached_tokens_total)`): what removing it would cost in recomputed prefill.
    `gen_throughput` is `sglang:gen_throughput`, decode tokens/s: with `running` it gives the
    inter-token latency of the running batch.
    """

    name: str
    running: float | None
    queued: float | None
    kv_usage: float | None
    cached_tokens_rate: float | None = None
    hit_rate: float | None = None
    gen_throughput: float | None = None

    @property
    def complete(self) -> bool:
        """Whether every gauge the decision needs is a finite number."""
        return all(finite(v) is not None for v in (self.running, self.queued, self.kv_usage))


@dataclass(frozen=True)
class Observed:
    """One snapshot of the model's serving revision, as the decision layer sees it.

    `ready` counts replicas that serve (the orchestrator's view); `replicas` are those that
    reported metrics, which must cover every ready one. `starting` are asked for and not ready
    yet. `arrival_rate` is requests/s over the last interval and `waiting` the requests held
    upstream (Knative's activator, the fleet's entry) for want of a ready replica; None means
    not measured. `ceiling` is the InferenceService's maxReplicas, what its quota admitted.
    """

    ready: int
    replicas: tuple[ReplicaMetrics, ...] = ()
    starting: int = 0
    arrival_rate: float | None = None
    waiting: float | None = None
    ttft_p95: float | None = None
    itl_p95: float | None = None
    revision: str | None = None
    ceiling: int | None = None
    metrics_error: str | None = None

    @property
    def current(self) -> int:
        """Replicas serving or on their way."""
        return self.ready + self.starting

    def busy(self) -> bool:
        """Whether any request is known to be in the model or on its way to it."""
        counted = [finite(self.arrival_rate), finite(self.waiting)]
        counted += [finite(r.running) for r in self.replicas]
        counted += [finite(r.queued) for r in self.replicas]
        return any(v is not None and v > 0 for v in counted)


class Verb(StrEnum):
    """The kind of a decision."""

    SCALE_UP = "scaleUp"
    SCALE_DOWN = "scaleDown"
    HOLD = "hold"
    HALT = "halt"  # metrics missing: the count stays, whatever they would have said


class Sample(Wire):
    """A value at a time: a recommendation (replicas) or an arrival rate (requests/s)."""

    at: datetime
    value: float


class ColdStarts(Wire):
    """Requests seen, requests that waited on a cold start, and the peak arrival rate, all
    decayed over the cold-start memory."""

    requests: float = 0.0
    waited: float = 0.0
    peak_rate: float = 0.0

    @property
    def share(self) -> float:
        """The share of requests that waited on a cold start (0 before any request)."""
        return self.waited / self.requests if self.requests > 0 else 0.0

    def share_after_a_wake(self, cold_start_s: float) -> float:
        """The share if the model went to zero now and its next burst came at the peak rate:
        what arrives during one cold start waits."""
        waiting = self.peak_rate * cold_start_s
        total = self.requests + waiting
        return (self.waited + waiting) / total if total > 0 else 0.0


class BreakEven(Wire):
    """When going to zero pays, from the model's own idle gaps (a ski-rental threshold).

    `zeroCostSeconds`: what one trip to zero costs in replica-seconds: the next cold start's
    GPU time, plus the requests that would wait on it (the waking one and the recent peak rate
    over a cold start) at the spec's `missCostSeconds` each. `idleSeconds`: the idle time after
    which going to zero costs least on average over the recorded gaps; absent (with `never`)
    when staying warm through every gap costs less. `meanGapSeconds` and `gaps`: the sample.
    """

    zero_cost_seconds: float = 0.0
    idle_seconds: float | None = None
    never: bool = False
    mean_gap_seconds: float | None = None
    gaps: int = 0


class Learned(Wire):
    """What the autoscaler learned about one replica of this model from its own metrics.

    `replica_rps`: requests/s one replica serves at the targets. `footprint`: the KV usage
    (fraction of a replica) one running request holds, used to price queued requests.
    `batch`: running requests of a replica whose queue grew (its saturation batch).
    `itl_floor`: the lowest inter-token latency seen (seconds): the decode step of a small batch.
    """

    replica_rps: float | None = None
    footprint: float | None = None
    batch: float | None = None
    itl_floor: float | None = None


class Demand(Wire):
    """The replicas each signal asks for at the last decision (for status and reports)."""

    kv: float = 0.0
    running: float = 0.0
    itl: float = 0.0
    latency: float = 0.0
    rate: float = 0.0
    predicted: float = 0.0
    floor: int = 0
    ceiling: int = 0


#: The latest decision and why, as `radixfleet autoscale status` shows it.
LastDecision = _LastDecision[Verb]


class AutoscaleStatus(Wire):
    """A policy's status: the decision state of its InferenceService's serving revision."""

    inference_service: str
    revision: str | None = None
    desired: int = Field(default=0, ge=0)
    recommendations: tuple[Sample, ...] = ()
    rates: tuple[Sample, ...] = ()
    learned: Learned = Field(default_factory=Learned)
    cold: ColdStarts = Field(default_factory=ColdStarts)
    gaps: tuple[float, ...] = ()  # the latest idle gaps, seconds between busy ticks
    backlogged: tuple[str, ...] = ()  # pods whose queue was past the allowance last tick
    break_even: BreakEven | None = None
    itl_estimates: tuple[float, ...] = ()  # the latest ticks' ITL estimates, seconds
    last_active_at: datetime | None = None
    last_tick_at: datetime | None = None
    last_scale_down_at: datetime | None = None
    last_scale_up_at: datetime | None = None
    demand: Demand = Field(default_factory=Demand)
    last_decision: LastDecision | None = None
    # The policy's `metadata.generation` the decision read (Kubernetes' convention: tools such
    # as kstatus read a status as current only when it equals the generation). The controller
    # sets it; decide() never reads it.
    observed_generation: int | None = None


def status_of(policy: Mapping[str, Any]) -> AutoscaleStatus | None:
    """The recorded status of a policy, None before its first decision."""
    status = policy.get("status") or {}
    if "inferenceService" not in status:
        return None
    return AutoscaleStatus.model_validate(status)


def to_wire(status: AutoscaleStatus) -> dict[str, Any]:
    """A status as stored in the CR: camelCase, no null (the schema has no nullable)."""
    return status_to_wire(status)
