"""The small interfaces a policy implements to run in the twin, and what each one observes.

The twin calls every policy the way a controller would: at its tick, with a plain snapshot of
the world and `now` in virtual seconds, and acts on the answer. The baselines and oracles in
this package implement the same protocols as radixfleet's own controllers, so a comparison is
only ever between decision functions. A policy is built by a factory (see
:mod:`radixfleet.twin.registry`) and holds its own state between calls, as a controller's
status would.

- :class:`RoutingPolicy`: which replica of one model in one region serves a request.
- :class:`ScalingPolicy`: how many replicas one model in one region should have; optionally
  (:class:`Prewarmer`) which prompts a new replica is sent before it takes traffic.
- :class:`TrafficPolicy`: which region serves the clients of each region (DNS weights).
- :class:`CanaryPolicy`: the next traffic step of a new revision, or promote, or roll back.
- :class:`AdmissionPolicy`: whether a tenant's request is admitted (token budgets), and
  optionally (:class:`UsageMeter`) what each admitted request finally used.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from radixfleet.replica import ReplicaStats, RequestSpec
from radixfleet.revisions import Measured

# -- routing -----------------------------------------------------------------------------------


class WorkerView(Protocol):
    """A replica as the router sees it: an id, the requests it has in flight, and what its
    cache holds (a gateway that follows the replica's KV events knows it exactly)."""

    @property
    def id(self) -> int:
        """Unique within the run; never reused."""
        ...

    @property
    def load(self) -> int:
        """Requests the router sent to this replica that have not finished (its own count)."""
        ...

    def cached_prefix(self, blocks: Sequence[Hashable]) -> int:
        """How many leading `blocks` of a prompt the replica's cache holds now, on its GPU or
        its host tier (smg's event index matches both alike)."""
        ...

    def tiered_prefix(self, blocks: Sequence[Hashable]) -> tuple[int, int]:
        """Leading `blocks` on the replica's GPU, and how many past those its host tier holds
        (HiCache's; 0 without one): what a gateway reading tiered KV events would know."""
        ...


class RoutingPolicy(Protocol):
    """Picks a replica for each request, as the gateway's policies do."""

    def select(self, spec: RequestSpec, workers: Sequence[WorkerView], now: float) -> int:
        """The index in `workers` (never empty) of the replica to send `spec` to."""
        ...

    def forget(self, worker_id: int) -> None:
        """The replica left the pool (removed, or found dead): drop what is kept about it."""
        ...


# -- autoscaling -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica of a service at a tick. `stats` is None unless the policy asks for it."""

    id: int
    state: str  # provisioning, starting, ready, draining, crashed
    created_at: float
    in_flight: int
    stats: ReplicaStats | None = None
    role: str | None = None  # "prefill" or "decode" in a P/D pair; None: colocated


@dataclass(frozen=True, slots=True)
class ServiceObservation:
    """One model in one region at a scaling tick.

    `concurrency` counts in-flight requests at the replicas now and `mean_concurrency` their
    time average since the previous tick (what Knative's queue-proxies report); `buffered`
    counts requests held while no replica is ready (the activator's). `arrivals` and
    `finished` count since the previous tick.
    """

    region: str
    model: str
    replicas: Sequence[ReplicaView]
    concurrency: int
    mean_concurrency: float
    buffered: int
    arrivals: int
    finished: int
    min_replicas: int
    max_replicas: int

    @property
    def ready(self) -> int:
        """Replicas that serve traffic now."""
        return sum(1 for r in self.replicas if r.state == "ready")

    @property
    def active(self) -> int:
        """Replicas ready or on their way (provisioning or starting)."""
        return sum(1 for r in self.replicas if r.state in ("ready", "starting", "provisioning"))


class ScalingPolicy(Protocol):
    """Decides a service's replica count every `tick_s`; the twin clamps it to min..max."""

    tick_s: float
    needs_replica_stats: bool

    def desired_replicas(self, observed: ServiceObservation, now: float) -> int:
        """How many replicas (ready or starting) the service should have from now."""
        ...


@runtime_checkable
class PairScaler(Protocol):
    """Optional for a ScalingPolicy: the counts of a prefill/decode pair's two pools, each
    from its own role's observation (radixfleet/twin/region_pd.py). A scaler without it
    leaves a pair at the scenario's counts."""

    def desired_pair(
        self, prefill: ServiceObservation, decode: ServiceObservation, now: float
    ) -> tuple[int, int]:
        """How many prefill and decode replicas the pair should have from now."""
        ...


@runtime_checkable
class DrainChooser(Protocol):
    """Optional for a ScalingPolicy: which replicas to remove when scaling down."""

    def choose_victims(self, observed: ServiceObservation, count: int) -> list[int]:
        """Ids of `count` replicas to drain; the default drains the youngest first."""
        ...


@dataclass(frozen=True)
class WarmUp:
    """Prompts to send a new replica before it takes traffic, as cache-block keys, and how
    long it may take them at most."""

    prefixes: list[tuple[Hashable, ...]]
    deadline_s: float


@dataclass(frozen=True)
class Waiting:
    """Requests a warm-up could keep waiting: `held` for want of a replica (a wake from zero,
    the activator's queue), which a new replica takes at once; `queued` in the serving
    replicas' schedulers, which stay there (SGLang moves no queued request) but say that new
    arrivals will queue too once they are many."""

    held: int = 0
    queued: int = 0


@runtime_checkable
class Prewarmer(Protocol):
    """Optional for a ScalingPolicy: warm a new replica's prefix cache before it serves."""

    def record(self, blocks: Sequence[Hashable], now: float) -> None:
        """A prompt of `blocks` was routed to the revision at `now`."""
        ...

    def warmup(
        self, *, kv_blocks: int, serving: int, waiting: Waiting, now: float
    ) -> WarmUp | None:
        """What a ready replica with room for `kv_blocks` is sent first; None: nothing, and
        it takes traffic at once (`serving` replicas take the revision's requests)."""
        ...

    def holds_back(self, *, serving: int, waiting: Waiting) -> bool:
        """Whether a warming replica may stay out of traffic now; False ends its warm-up."""
        ...


# -- regions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegionObservation:
    """One region over the last epoch, as health checks and Prometheus would show it."""

    name: str
    endpoint_up: bool
    requests: int
    failed: int
    ttft_ok: int
    ready_replicas: int
    active_replicas: int


@dataclass(frozen=True, slots=True)
class FleetObservation:
    """Every region at an epoch boundary, in scenario order."""

    regions: Sequence[RegionObservation]

    def region(self, name: str) -> RegionObservation:
        """The observation of the region called `name`."""
        return next(r for r in self.regions if r.name == name)


@dataclass(frozen=True, slots=True)
class TrafficDecision:
    """Where each region's clients go, and replicas to add ahead of shifted load.

    `weights[home][region]` is a relative weight (rows need not sum to 1). `min_replicas`
    raises a service's floor: `{(region, model): count}`.
    """

    weights: Mapping[str, Mapping[str, float]]
    min_replicas: Mapping[tuple[str, str], int] = field(default_factory=dict)


class TrafficPolicy(Protocol):
    """Global traffic steering (Route 53 records), decided every `interval_s`.

    Clients cache a DNS answer for `ttl_s`: a change reaches each client some time within that.
    """

    interval_s: float
    ttl_s: float

    def decide(self, observed: FleetObservation, now: float) -> TrafficDecision:
        """The weights from now on."""
        ...


# -- canaries ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CanaryObservation:
    """A rollout at a tick: readiness, the current weight, and the revisions' recent numbers.

    `measured` covers the last `window_s` seconds (the policy's analysis interval), and so do
    the canary's p99 TTFT and p99 request duration (arrival to last token), which judges of
    whole requests read (Flagger's builtin request-duration); None without finished requests.
    """

    service: str
    canary_ready: bool
    weight: int
    measured: Measured
    canary_ttft_p99_s: float | None = None
    canary_duration_p99_s: float | None = None


@dataclass(frozen=True, slots=True)
class CanaryStep:
    """What to do: set a weight, promote (all traffic to the canary), or roll back (none)."""

    weight: int | None = None
    promote: bool = False
    rollback: bool = False
    reason: str = ""


class CanaryPolicy(Protocol):
    """Steps one rollout; `window_s` is the metrics window it wants at each tick, `baseline`
    whether it wants a baseline revision beside the canary (radixfleet.revisions.Measured)."""

    tick_s: float
    window_s: float
    baseline: bool

    def step(self, observed: CanaryObservation, now: float) -> CanaryStep:
        """The next move of the rollout."""
        ...


# -- tenants -----------------------------------------------------------------------------------


class AdmissionPolicy(Protocol):
    """Per-tenant admission on the request path (token-rate budgets)."""

    def admit(self, tenant: str, prompt_tokens: int, now: float, *, reserve: int = 0) -> bool:
        """Whether to accept the request, which may generate `reserve` tokens; a refused
        request fails with 429."""
        ...


@runtime_checkable
class UsageMeter(Protocol):
    """Optional for an AdmissionPolicy: told how each admitted request ended, to settle it.

    A token budget charges the prompt on admission and the completion as it streams; without
    this, a budget in the twin would only ever see prompts.
    """

    def admitted(self, key: int) -> None:
        """The request `admit` just accepted is `key` (unique within the run)."""
        ...

    def settle(self, key: int, output_tokens: int, *, ok: bool, now: float) -> None:
        """Request `key` ended with `output_tokens` served; `ok` False: it failed."""
        ...


class AdmitAll:
    """No budgets: every request is admitted."""

    def admit(self, tenant: str, prompt_tokens: int, now: float, *, reserve: int = 0) -> bool:
        """Always True."""
        return True


def uniform_weights(regions: Sequence[str]) -> dict[str, dict[str, float]]:
    """Every client served by its own region: the identity traffic matrix."""
    return {home: {name: float(name == home) for name in regions} for home in regions}
