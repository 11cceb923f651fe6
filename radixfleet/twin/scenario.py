"""A twin scenario as types: the fleet, its workload, the faults on its timeline, the policies.

A scenario file is YAML validated into :class:`Scenario`; field rules (ranges, names, enums) live
on these types and rules relating entries to each other in :mod:`radixfleet.twin.load`, so a bad
file is reported whole, in the catalog's `file: entry.field: message` form. Times are seconds of
virtual time from the start of the run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixfleet.config.catalog import HicacheWritePolicy, Name, TokenBudget
from radixfleet.replica.disagg import DEFAULT_TRANSFER_BACKEND, TransferBackend
from radixfleet.twin.breaker import BreakerSettings

PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Strict(BaseModel):
    """Base of every scenario type: unknown keys are errors; ints are accepted for floats."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# -- the fleet ---------------------------------------------------------------------------------


class GpuPool(Strict):
    """GPUs of one type in one region: how many exist at most and how many are up already.

    A replica placed beyond `warm_gpus` waits for a new node (`node_provision_s`) and pulls its
    weights from the model store (CALIBRATION: 80-120 s for the node, ~61 s for 16 GB). On a
    node already up it loads them from the node's disk, where the pool caches them
    (`model_cache`: the catalog's `model_cache_gib`, KServe's local model cache); a pool that
    does not downloads them for every replica.
    """

    name: Name
    gpu_type: str = "H100-SXM-80GB"
    gpus: PositiveInt = 64
    warm_gpus: NonNegativeInt = 64
    node_provision_s: NonNegativeFloat = 100.0
    model_cache: bool = True


class Region(Strict):
    """A region: its GPU pools and the share of clients whose nearest region it is."""

    name: Name
    gpu_pools: list[GpuPool] = Field(min_length=1)
    traffic_share: PositiveFloat = 1.0


class Slo(Strict):
    """Per-request objectives: TTFT from the client's arrival, ITL as the request's mean."""

    ttft_ms: PositiveFloat = 1000.0
    itl_ms: PositiveFloat = 50.0
    target: Fraction = 0.95


class RouterSettings(Strict):
    """smg 1.13's defaults: cache_aware's thresholds and tree, retries, circuit breaker."""

    cache_threshold: Fraction = 0.3
    balance_abs_threshold: NonNegativeInt = 64
    balance_rel_threshold: Annotated[float, Field(ge=1)] = 1.5
    eviction_interval_s: PositiveFloat = 60.0
    max_tree_size_chars: PositiveInt = 67_108_864
    chars_per_token: PositiveFloat = 4.0
    # `--retry-max-retries`: a refusal (503) is tried again on another pick, a worker's 500 is
    # passed on (measured on smg 1.13.0: radixfleet/controllers/routers/README.md).
    max_retries: NonNegativeInt = 5
    # Kubernetes readiness (10 s period x 3 failures) drops a dead pod from discovery.
    unhealthy_after_s: NonNegativeFloat = 30.0
    # The gateway's per-worker circuit breaker (smg's --cb-* defaults; radixfleet.twin.breaker).
    circuit_breaker: bool = True
    cb_failure_threshold: PositiveInt = 10
    cb_success_threshold: PositiveInt = 3
    cb_open_s: PositiveFloat = 60.0
    cb_window_s: PositiveFloat = 120.0

    def breaker(self) -> BreakerSettings | None:
        """The circuit breaker's settings, or None when it is off."""
        if not self.circuit_breaker:
            return None
        return BreakerSettings(
            failure_threshold=self.cb_failure_threshold,
            success_threshold=self.cb_success_threshold,
            open_seconds=self.cb_open_s,
            window_seconds=self.cb_window_s,
        )


class KvTiers(Strict):
    """SGLang HiCache's tiers below the GPU for every replica of a model
    (radixfleet/replica/tiers.py): `--enable-hierarchical-cache` with a host pool of `host_gib`
    GiB per replica (`--hicache-size`) and its `--hicache-write-policy`, and, if `storage_gib`
    is set, a storage backend of that size shared by all the model's replicas in a region (as
    Mooncake's store is; `--hicache-storage-backend`)."""

    host_gib: PositiveFloat
    write_policy: HicacheWritePolicy = "write_through"
    storage_gib: PositiveFloat | None = None


class Disaggregation(Strict):
    """A model served as a prefill/decode pair (SGLang's `--disaggregation-mode`, smg's PD
    mode): `prefill_replicas` replicas run only prefill passes, `decode_replicas` only decode,
    and each request's KV moves between them over `transfer_backend`'s link
    (radixfleet/replica/disagg.py). smg picks a prefill worker with the policy set's routing
    (cache-aware) and a decode worker with `decode_policy`. These counts replace the model's
    `initial_replicas`; the pair is scaled as one (both to zero together)."""

    prefill_replicas: NonNegativeInt = 1
    decode_replicas: NonNegativeInt = 1
    transfer_backend: TransferBackend = DEFAULT_TRANSFER_BACKEND
    decode_policy: Literal["power_of_two", "least_load"] = "power_of_two"

    @model_validator(mode="after")
    def _paired(self) -> Disaggregation:
        if (self.prefill_replicas == 0) != (self.decode_replicas == 0):
            raise ValueError("a pair has prefill and decode replicas, or neither (at zero)")
        return self

    @property
    def replicas(self) -> int:
        """Both pools' replicas together."""
        return self.prefill_replicas + self.decode_replicas


class Lora(Strict):
    """A multi-LoRA model: `adapters` adapters on the one base, each request naming one drawn by
    Zipf popularity (adapter rank k, from 1, with weight k^-zipf_alpha; seeded by the scenario's
    seed), as in S-LoRA's evaluation. Each replica holds at most `max_loaded_loras` adapters in
    host memory (`--max-loaded-loras`) and runs at most `max_loras_per_batch` distinct ones in
    a batch (`--max-loras-per-batch`); `rank` sizes an adapter's weights (`--max-lora-rank`).
    Where adapters are kept and how requests find them is the routing policy's
    (`adapter_dynamic`, `adapter_partitioned`, `adapter_blind`: the twin's README)."""

    adapters: PositiveInt
    zipf_alpha: NonNegativeFloat = 1.0
    rank: PositiveInt = 16
    max_loaded_loras: PositiveInt = 64
    max_loras_per_batch: PositiveInt = 8

    @model_validator(mode="after")
    def _bounds(self) -> Lora:
        if self.max_loras_per_batch > self.max_loaded_loras:
            raise ValueError("max_loras_per_batch is above max_loaded_loras")
        return self


class Model(Strict):
    """One model served as an InferenceService in some regions, with its replica profile."""

    name: Name
    profile: str = "h100-llama-3.1-8b"
    pool: Name
    regions: list[Name] = Field(default_factory=list, description="empty: every region")
    min_replicas: NonNegativeInt = 0
    max_replicas: PositiveInt = 8
    initial_replicas: NonNegativeInt = 1
    block_tokens: PositiveInt = 64
    schedule_policy: Literal["fcfs", "lpm"] = "lpm"
    slo: Slo = Field(default_factory=Slo)
    # Knative's default request timeout: a request buffered longer than this fails.
    request_timeout_s: PositiveFloat = 300.0
    kv_tiers: KvTiers | None = None  # None: the GPU's cache alone, as SGLang's default
    disaggregation: Disaggregation | None = None  # None: colocated, each replica does both
    lora: Lora | None = None  # None: the base model alone, no adapter in any request

    @property
    def first_replicas(self) -> int:
        """The replicas the run starts with: a pair's two pools, else `initial_replicas`."""
        pair = self.disaggregation
        return self.initial_replicas if pair is None else pair.replicas


class Tenant(Strict):
    """A team sending traffic to one model; its sources are in the workload.

    `token_budget` is the catalog's (None: unlimited); an admission policy may enforce it.
    """

    name: Name
    model: Name
    token_budget: TokenBudget | None = None


# -- the workload --------------------------------------------------------------------------------


class SharedPrefixSource(Strict):
    """Groups of requests sharing a system prompt (SGLang's generated-shared-prefix bench)."""

    kind: Literal["shared_prefix"]
    tenant: Name
    rate_rps: PositiveFloat
    groups: PositiveInt = 64
    system_prompt_tokens: PositiveInt = 2048
    question_tokens: PositiveInt = 256
    output_tokens: PositiveInt = 256


class PoissonSource(Strict):
    """Independent requests with log-normal sizes shaped like the Azure conversation trace."""

    kind: Literal["poisson"]
    tenant: Name
    rate_rps: PositiveFloat
    prompt_tokens_mean: PositiveFloat = 1155.0
    output_tokens_mean: PositiveFloat = 211.0
    system_prompt_tokens: NonNegativeInt = 0


class TraceSource(Strict):
    """A public trace, merged with time-shifted copies of itself to reach `rate_rps`.

    `azure`: the Azure LLM 2023 CSV (no prefix information: prompts share only the tenant's
    system prompt). `mooncake`: the Mooncake JSONL with its 512-token block hashes.
    """

    kind: Literal["azure", "mooncake"]
    tenant: Name
    path: str | None = None
    rate_rps: PositiveFloat | None = None
    system_prompt_tokens: NonNegativeInt = 0


class LongDocQaSource(Strict):
    """Short questions about long documents (a document-QA or RAG-over-a-corpus shape): each
    prompt is one document (`document_tokens_min` to `_max`, uniform per document) followed by
    a question of its own; documents are asked about by Zipf popularity (rank k with weight
    k^-zipf_s); arrivals are Poisson."""

    kind: Literal["long_doc_qa"]
    tenant: Name
    rate_rps: PositiveFloat
    documents: PositiveInt = 200
    document_tokens_min: PositiveInt = 20_000
    document_tokens_max: PositiveInt = 60_000
    question_tokens: PositiveInt = 64
    output_tokens: PositiveInt = 128
    zipf_s: NonNegativeFloat = 1.0

    @model_validator(mode="after")
    def _sizes(self) -> LongDocQaSource:
        if self.document_tokens_min > self.document_tokens_max:
            raise ValueError("document_tokens_min is above document_tokens_max")
        return self


Source = Annotated[
    SharedPrefixSource | PoissonSource | TraceSource | LongDocQaSource,
    Field(discriminator="kind"),
]


class Workload(Strict):
    """Where requests come from; `rate_scale` multiplies every source's rate."""

    sources: list[Source] = Field(min_length=1)
    rate_scale: PositiveFloat = 1.0


# -- faults ------------------------------------------------------------------------------------


class RegionOutage(Strict):
    """Every replica of a region dies and its endpoint refuses connections, then recovers."""

    kind: Literal["region_outage"]
    at_s: NonNegativeFloat
    region: Name
    duration_s: PositiveFloat


class ReplicaCrash(Strict):
    """`count` ready replicas of a model crash; Kubernetes restarts them after a back-off."""

    kind: Literal["replica_crash"]
    at_s: NonNegativeFloat
    region: Name
    model: Name
    count: PositiveInt = 1
    restart_after_s: NonNegativeFloat = 10.0


class Regression(Strict):
    """How a canary revision is worse than stable: slower steps and/or injected 500s."""

    slowdown: PositiveFloat = 1.0
    error_rate: Fraction = 0.0


class CanaryRollout(Strict):
    """A new revision of a model, rolled out in `regions` (empty: all) from `at_s`."""

    kind: Literal["canary"]
    at_s: NonNegativeFloat
    model: Name
    regions: list[Name] = Field(default_factory=list)
    regression: Regression = Field(default_factory=Regression)


class TenantBurst(Strict):
    """A tenant's arrival rate multiplied by `factor` for `duration_s`."""

    kind: Literal["tenant_burst"]
    at_s: NonNegativeFloat
    tenant: Name
    duration_s: PositiveFloat
    factor: Annotated[float, Field(gt=1)] = 4.0


Fault = Annotated[
    RegionOutage | ReplicaCrash | CanaryRollout | TenantBurst, Field(discriminator="kind")
]


# -- policies ----------------------------------------------------------------------------------


class PolicySet(Strict):
    """One column of the comparison: a policy for each decision the fleet makes.

    Each field names a built-in (see :mod:`radixfleet.twin.registry`) or `module:attribute`, a
    factory taking the scenario and the model's settings.
    """

    name: Name
    routing: str = "smg_cache_aware_http"
    autoscale: str = "kpa"
    traffic: str = "route53"
    canary: str = "radixfleet"
    admission: str = "none"
    baseline: bool = False


class Scenario(Strict):
    """A whole twin run: the fleet, its traffic, what goes wrong, and the policies compared."""

    name: Name
    description: str = ""
    seed: int = 0
    duration_s: PositiveFloat
    sample_interval_s: PositiveFloat = 10.0
    epoch_s: PositiveFloat = 10.0
    regions: list[Region] = Field(min_length=1)
    models: list[Model] = Field(min_length=1)
    tenants: list[Tenant] = Field(min_length=1)
    router: RouterSettings = Field(default_factory=RouterSettings)
    workload: Workload
    faults: list[Fault] = Field(default_factory=list)
    policies: list[PolicySet] = Field(min_length=1)

    def model(self, name: str) -> Model:
        """The model called `name` (the loader has checked it exists)."""
        return next(m for m in self.models if m.name == name)

    def tenant(self, name: str) -> Tenant:
        """The tenant called `name`."""
        return next(t for t in self.tenants if t.name == name)

    def model_regions(self, model: Model) -> list[str]:
        """The regions that serve `model`, in scenario order."""
        return model.regions or [r.name for r in self.regions]
