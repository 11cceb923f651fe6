"""The local fleet's spec: regions, their models and replica counts, and the fleet's clocks.

Defaults and limits live here, on the types, for the CLI, the tests and the controllers alike.
`demo_spec()` is the two-region fleet `radixfleet demo` runs, shaped like the example catalog:
llama-3-1-8b scales to zero (it starts at zero in eu-west-1 and is woken by the first request)
and llama-3-1-70b is kept warm; eu-west-1 also serves llama-3-1-70b-pd, a prefill/decode pair.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixfleet.profile import DEFAULT_PROFILE_NAME
from radixfleet.replica.disagg import DEFAULT_TRANSFER_BACKEND, TransferBackend
from radixfleet.sglang_flags import check_args, parse_args

RouterPolicy = Literal["cache_aware", "round_robin", "random", "power_of_two", "least_load"]
# How a router reaches its replicas: gRPC (SGLang's scheduler protocol; smg tokenizes and routes
# cache-aware on the index it builds from the replicas' KV events) or HTTP (smg's approximate
# tree, built from the text it sent where).
WorkerTransport = Literal["grpc", "http"]
# How the entry spreads a revision's requests over its router replicas: by a consistent hash of
# the prompt's opening (requests that share a system prompt meet the same replica's tree), or at
# random (as a Kubernetes Service would).
RouterSpread = Literal["prefix", "random"]


#: The SGLang flags (by destination) a local fleet's model may give its emulated replicas: the
#: ones `radixfleet emulate` takes under SGLang's own spelling.
EMULATED_FLAGS = frozenset({"enable_hierarchical_cache", "hicache_size", "hicache_ratio",
                            "hicache_write_policy", "hicache_storage_backend"})  # fmt: skip


def revision_name(model: str, generation: int) -> str:
    """The name KServe's Knative revisions take: `<isvc>-predictor-00001`, then 00002, ..."""
    return f"{model}-predictor-{generation:05d}"


class DisaggregationSpec(BaseModel):
    """A prefill/decode pair: SGLang's two roles of one model behind one smg in PD mode.

    The counts are each role's replicas at start; both are zero (the pair asleep) or neither
    is (radixfleet/controllers/autoscale/pairs.py: no decode without a prefill peer).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: int = Field(default=1, ge=0, description="prefill replicas at start")
    decode: int = Field(default=1, ge=0, description="decode replicas at start")
    transfer_backend: TransferBackend = Field(
        default=DEFAULT_TRANSFER_BACKEND, description="SGLang's KV transfer engine"
    )

    @model_validator(mode="after")
    def _paired(self) -> DisaggregationSpec:
        if (self.prefill == 0) != (self.decode == 0):
            raise ValueError(
                f"prefill {self.prefill} and decode {self.decode}: both roles are at zero "
                "together or neither is"
            )
        return self

    @property
    def pairs(self) -> int:
        """Prefill/decode pairs at start: what serves requests."""
        return min(self.prefill, self.decode)


class ModelSpec(BaseModel):
    """One model served in a region: replicas behind one smg gateway (a P/D pair's two roles
    behind one smg in PD mode, with `disaggregation`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="served model name, as clients send it")
    replicas: int = Field(default=1, ge=0, description="at start; 0 = scaled to zero")
    max_replicas: int = Field(default=8, ge=1)
    profile: str = Field(default=DEFAULT_PROFILE_NAME, description="built-in replica profile")
    namespace: str = Field(default="default", description="the Kubernetes namespace it stands for")
    profile_overrides: dict[str, float] = Field(
        default_factory=dict, description="ReplicaProfile fields to change, e.g. a small KV cache"
    )
    tenants: list[str] = Field(
        default_factory=list,
        description="the tenants whose keys may call it, as the region's gate names them"
        " (none: every tenant's); another tenant's key finds no such model",
    )
    sglang_args: list[str] = Field(
        default_factory=list,
        description="SGLang flags its replicas start with, as a runtime's args: the HiCache ones"
        " (--enable-hierarchical-cache, --hicache-size, --hicache-ratio, --hicache-write-policy,"
        " --hicache-storage-backend), which the emulated replicas model",
    )
    disaggregation: DisaggregationSpec | None = Field(
        default=None,
        description="serve it as a prefill/decode pair; `replicas` then counts its pairs",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ModelSpec:
        if self.replicas > self.max_replicas:
            raise ValueError(f"replicas {self.replicas} exceeds max_replicas {self.max_replicas}")
        pd = self.disaggregation
        if pd is not None and self.replicas != pd.pairs:
            raise ValueError(
                f"replicas {self.replicas}: a P/D model's replicas count its pairs, "
                f"min(prefill {pd.prefill}, decode {pd.decode}) = {pd.pairs}"
            )
        return self

    @model_validator(mode="after")
    def _modelled_flags(self) -> ModelSpec:
        problems = list(check_args(self.sglang_args))
        if problems:
            raise ValueError("; ".join(problems))
        other = sorted(set(parse_args(self.sglang_args)) - EMULATED_FLAGS)
        if other:
            raise ValueError(f"the emulated replicas do not model the SGLang flags of {other}")
        return self

    @property
    def hicache(self) -> bool:
        """Whether its replicas run SGLang HiCache (a host tier below the GPU)."""
        return "enable_hierarchical_cache" in parse_args(self.sglang_args)


class RegionSpec(BaseModel):
    """A region: an entry that routes by model to each model's router."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    router_policy: RouterPolicy = "cache_aware"
    router_workers: WorkerTransport = "grpc"
    routers: int = Field(default=1, ge=1, le=8, description="router replicas per revision")
    router_spread: RouterSpread = "prefix"

    @model_validator(mode="after")
    def _unique_models(self) -> RegionSpec:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"region {self.name!r} lists a model twice: {names}")
        return self

    def model(self, name: str) -> ModelSpec:
        """The model called `name`; KeyError when the region does not serve it."""
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(name)


class LocalFleetSpec(BaseModel):
    """A local fleet: regions, and the clocks of its replicas and entries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    regions: list[RegionSpec] = Field(min_length=1)
    time_scale: float = Field(
        default=1.0, gt=0, description="multiplies every replica step time (1: H100 speed)"
    )
    cold_start_s: float | None = Field(
        default=2.0,
        ge=0,
        description="cold start of a new replica in profile seconds (a real one takes 45-90 s);"
        " None keeps the profile's",
    )
    initial_warm: bool = Field(
        default=True, description="replicas present at start skip the cold start"
    )
    wake_timeout_s: float = Field(
        default=60.0, gt=0, description="how long the entry holds a request for a model at zero"
    )
    retry_after_s: int = Field(default=5, ge=1, description="Retry-After of a wake timeout's 503")
    replica_start_timeout_s: float = Field(default=120.0, gt=0)
    router_health_interval_s: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _unique_regions(self) -> LocalFleetSpec:
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise ValueError(f"a region is listed twice: {names}")
        return self

    def region(self, name: str) -> RegionSpec:
        """The region called `name`; KeyError when there is none."""
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)


#: eu-west-1's 8B replicas run SGLang HiCache with a GPU cache cut to 24k tokens (an H100 holds
#: 420k; the demo's longest prompt is 22k): the demo's minute of traffic then overflows the GPU,
#: as a day would, and prompts the GPU evicted come back from the host tier (four times the
#: GPU's) instead of being recomputed. us-east-1's 8B keeps the plain H100 for comparison.
DEMO_HICACHE_ARGS = ["--enable-hierarchical-cache", "--hicache-ratio", "4"]
DEMO_GPU_TOKENS = 24_576
DEMO_PD_MODEL = "llama-3-1-70b-pd"


def demo_spec() -> LocalFleetSpec:
    """Two regions, as in the example catalog: 8B scales to zero (and runs HiCache in
    eu-west-1), 70B is kept warm; eu-west-1's 70B P/D pair is one prefill and one decode."""
    llama_8b = ModelSpec(name="llama-3-1-8b", namespace="team-search", replicas=2)
    tiered_8b = llama_8b.model_copy(
        update={
            "replicas": 0,
            "profile_overrides": {"kv_capacity_tokens": DEMO_GPU_TOKENS},
            "sglang_args": DEMO_HICACHE_ARGS,
        }
    )
    llama_70b = ModelSpec(
        name="llama-3-1-70b", namespace="team-search", replicas=1, profile="4xh100-llama-3.1-70b"
    )
    llama_70b_pd = llama_70b.model_copy(
        update={"name": DEMO_PD_MODEL, "disaggregation": DisaggregationSpec(prefill=1, decode=1)}
    )
    return LocalFleetSpec(
        regions=[
            RegionSpec(name="us-east-1", models=[llama_8b, llama_70b]),
            RegionSpec(name="eu-west-1", models=[tiered_8b, llama_70b_pd]),
        ]
    )
