"""The FailoverPolicy's spec as a type: every field, default and limit of regional failover.

One FailoverPolicy steers one global name (`<model>.<domain>`, the weighted records `infra/`
declares: one per region, set identifier = region, each guarded by a Route 53 health check).
The CRD (`crd.py`, rendered to `deploy/crds/`) is generated from this type, so the API
server fills in these defaults; what only it checks (CEL rules, list types) is schema metadata
here that changes no parsing. The decision layer reads only
this type.

Defaults and why:

- `intervalSeconds` 5: one judgement per interval, the shortest a scrape allows.
- `unreachableAfter` 1: a region nobody outside can reach (its Prometheus does not answer and
  most peers' probes or its health check see it down) is out at the first such interval, so a
  dead region's clients move within one interval plus the record's TTL (15 s with a 10 s TTL),
  against Route 53's 90 s (30 s x 3) before the TTL. Unreachability from several places at
  once is a fact, not noise: it needs no streak.
- `unhealthyAfter` 4: a region that answers but breaks a threshold (errors, TTFT burn) is out
  after 20 s of bad intervals in a row, so that noise in a healthy region's rates never moves
  its traffic.
- `healthyAfter` 12 (60 s) and `minHoldSeconds` 120: fail fast, come back slowly. A region taken out
  gets no traffic back for at least the hold time, so noisy signals cannot flap it faster.
- `failback` 25% of the region's weight every 30 s: four steps back to full weight, each only
  once the region has warm replicas for it.
- `prescale.headroom` 1.2: survivors are floored at 120% of the fleet's steady-state replicas
  times their new traffic share, since a cold start takes a minute or more.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from radixfleet.kit.crd import Crd

API_VERSION = "v1alpha1"
KIND = "FailoverPolicy"
PLURAL = "failoverpolicies"

MIN_INTERVAL_SECONDS = 5
MAX_RECORD_WEIGHT = 255  # Route 53's largest weight
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Spec(BaseModel):
    """Base of the spec types: camelCase on the wire as in the CRD, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


def _strict(rule: str, message: str) -> Crd:
    """A strict bound the API server holds by CEL (the schema's bounds are inclusive)."""
    return Crd({"x-kubernetes-validations": [{"rule": rule, "message": message}]})


_ABOVE_ZERO = _strict("self > 0.0", "must be above 0")
_REGIONS = Crd(
    {
        "maxItems": 32,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "x-kubernetes-validations": [
            {
                "rule": "self.exists(r, !has(r.weight) || r.weight > 0)",
                "message": "at least one region needs a weight above 0",
            }
        ],
    }
)


class Region(Spec):
    """One region behind the global name: its record, its normal weight, its Prometheus.

    `weight` 0 makes a standby region: it gets traffic only when no weighted region is healthy.
    `setIdentifier` defaults to the region's name, as `infra/` declares the records.
    `prometheusUrl` defaults to the controller's URL template with `{region}` filled in.
    """

    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
    weight: Annotated[int, Field(ge=0, le=MAX_RECORD_WEIGHT)] = 100
    set_identifier: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    prometheus_url: str | None = None

    @property
    def record_id(self) -> str:
        """The set identifier of the region's weighted record."""
        return self.set_identifier or self.name


class Signals(Spec):
    """What makes an interval bad for a region; any one failing signal is enough.

    `availability` is the share of the models' routers and replicas that answer their scrape;
    `errorRate` the share of requests that failed; the TTFT burn rate how fast the region
    spends the error budget of `ttftObjective` (the share of requests whose first token comes
    within `ttftSloSeconds`): 14.4 is the page-now burn of Google's SRE workbook. Rates need
    `minRequests` in the window to be judged; fewer leave them unjudged (halt, don't fail).
    """

    window_seconds: Annotated[int, Field(ge=MIN_INTERVAL_SECONDS, le=3600)] = 30
    min_availability: Fraction = 0.5
    max_error_rate: Fraction = 0.1
    ttft_slo_seconds: Annotated[float, Field(gt=0), _ABOVE_ZERO] = 2.0
    ttft_objective: Annotated[
        float,
        Field(gt=0.0, lt=1.0),
        _strict("self > 0.0 && self < 1.0", "a fraction strictly between 0 and 1"),
    ] = 0.95
    max_ttft_burn_rate: Annotated[float, Field(gt=0), _ABOVE_ZERO] = 14.4
    min_requests: Annotated[float, Field(ge=0)] = 10.0
    use_health_checks: bool = True


class Failback(Spec):
    """How a recovered region gets its traffic back: `stepPercent` of its weight per step."""

    step_percent: Annotated[int, Field(ge=1, le=100)] = 25
    step_seconds: Annotated[int, Field(ge=0)] = 30


class Prescale(Spec):
    """Raising the floor of the policy's models where traffic is about to go.

    A region whose only failing signal is a slow TTFT still serves: its traffic moves once the
    survivors have their raised floors ready, or after `maxWaitSeconds`. A region that fails
    requests (or does not answer) loses its traffic at once: waiting only loses more of it.
    """

    enabled: bool = True
    headroom: Annotated[float, Field(ge=1.0, le=10.0)] = 1.2
    max_wait_seconds: Annotated[int, Field(ge=0)] = 120


class FailoverPolicySpec(Spec):
    """Regions behind one weighted name, the signals they are judged by, and the pacing."""

    hosted_zone_id: Annotated[str, Field(min_length=1)]
    record_name: Annotated[str, Field(min_length=1)]
    record_type: Literal["A", "AAAA", "CNAME"] = "CNAME"
    models: Annotated[
        list[Annotated[str, Field(pattern=NAME_PATTERN)]],
        Crd({"maxItems": 32, "x-kubernetes-list-type": "set"}),
    ] = Field(min_length=1)
    # Where those models' InferenceServices run: one per tenant that serves the model under
    # this name. Empty: the policy's own namespace.
    namespaces: Annotated[
        list[Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]],
        Crd({"x-kubernetes-list-type": "set"}, default_from=list),
    ] = Field(default_factory=list, max_length=32)
    regions: Annotated[list[Region], _REGIONS] = Field(min_length=2)
    interval_seconds: Annotated[int, Field(ge=MIN_INTERVAL_SECONDS)] = 5
    # The API server fills in every nested default, shown whole in `kubectl get -o yaml`.
    signals: Annotated[Signals, Crd(default_from=Signals)] = Field(default_factory=Signals)
    unreachable_after: Annotated[int, Field(ge=1)] = 1
    unhealthy_after: Annotated[int, Field(ge=1)] = 4
    healthy_after: Annotated[int, Field(ge=1)] = 12
    min_hold_seconds: Annotated[int, Field(ge=0)] = 120
    failback: Annotated[Failback, Crd(default_from=Failback)] = Field(default_factory=Failback)
    prescale: Annotated[Prescale, Crd(default_from=Prescale)] = Field(default_factory=Prescale)
    paused: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise ValueError(f"region names repeat: {names}")
        ids = [r.record_id for r in self.regions]
        if len(set(ids)) != len(ids):
            raise ValueError(f"set identifiers repeat: {ids}")
        if not any(r.weight for r in self.regions):
            raise ValueError("at least one region needs a weight above 0")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"models repeat: {self.models}")
        if len(set(self.namespaces)) != len(self.namespaces):
            raise ValueError(f"namespaces repeat: {self.namespaces}")
        return self

    def namespaces_or(self, own: str) -> list[str]:
        """The namespaces of the models' InferenceServices; `own` (the policy's) by default."""
        return list(self.namespaces) or [own]

    def region(self, name: str) -> Region:
        """The region called `name`."""
        return next(r for r in self.regions if r.name == name)

    @property
    def region_names(self) -> list[str]:
        return [r.name for r in self.regions]
