"""The fleet's typed configuration: regions and GPU pools, tenants, and the model catalog.

Field-level rules (ranges, name syntax, enums) live on the types; rules that relate entries to
each other (a tenant that must exist, a GPU type some region must offer) live in `crosscheck.py`
so that every problem in a file is reported at once.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from radixfleet.platform import RESERVED_NAMESPACE_PREFIX, RESERVED_NAMESPACES
from radixfleet.replica.disagg import DEFAULT_TRANSFER_BACKEND, TransferBackend

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
STORAGE_SCHEMES = ("s3://", "hf://", "pvc://", "gs://")


def _dns1123_label(value: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


def _model_name(value: str) -> str:
    # The name becomes an InferenceService's, which KServe turns into DNS names
    # (`<name>-predictor.<namespace>`): a DNS-1035 label, so it starts with a letter.
    if not value[:1].isalpha():
        raise ValueError(f"{value!r} must start with a letter: it names an InferenceService")
    return value


# Characters a storage URI's path may not hold: `*` and `?` are IAM's wildcards and `$` starts
# its policy variables. The path becomes the tenant's S3 read grant (infra: each tenant's pods
# read only the prefixes of its models), so `s3://radixfleet-models/*` granted every tenant's
# weights.
_GRANT_WIDENERS = frozenset("*?$")


def _storage_uri(value: str) -> str:
    if not value.startswith(STORAGE_SCHEMES) or len(value.split("://", 1)[1]) == 0:
        raise ValueError(f"{value!r} must start with one of {', '.join(STORAGE_SCHEMES)}")
    problem = storage_grant_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _tokenizer_source(value: str) -> str:
    if value.startswith("hf://"):
        if not _HUB_REPOSITORY.fullmatch(value.removeprefix("hf://")):
            raise ValueError(f"{value!r} must name a Hugging Face repository: hf://ORG/NAME")
        return value
    if not value.startswith("/") or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} must be hf://ORG/NAME or an absolute folder in the router's "
                         "image, without '.' or '..' parts")  # fmt: skip
    return value


# A hub repository's owner and name: letters, digits, '-', '_' and '.'.
_HUB_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def storage_grant_problem(uri: str) -> str | None:
    """Why `uri` would reach beyond its own folder if granted (wildcards, policy variables, the
    bucket's root, `.` or `..`), or None. `radixfleet validate` applies it to any manifest."""
    if "://" not in uri:
        return None  # a path in the image or a claim's mount: no grant is made from it
    location, path = storage_location(uri)
    if _GRANT_WIDENERS & set(uri):
        return f"{uri!r}: no wildcards or variables ({' '.join(sorted(_GRANT_WIDENERS))})"
    segments = path.removesuffix("/").split("/")
    if not path or any(s in ("", ".", "..") for s in segments):
        return f"{uri!r} must name a folder inside {location}: no empty, '.' or '..' parts"
    return None


def storage_location(uri: str) -> tuple[str, str]:
    """(`scheme://bucket`, key prefix) of a storage URI: the bucket, claim or hub organisation,
    and the path inside it."""
    scheme, rest = uri.split("://", 1)
    bucket, _, path = rest.partition("/")
    return f"{scheme}://{bucket}", path


# Bounds of the numbers, where the cluster or the cloud sets them: a catalog past one would
# render manifests the API server or the cloud refuses, or overflow a computation first.
INT32_MAX = 2**31 - 1  # Kubernetes' int32 fields (replicas) and SGLang's integer flags
MAX_NODES = 5_000  # the largest cluster Kubernetes supports
MAX_GPUS_PER_NODE = 16
MAX_GPUS = MAX_NODES * MAX_GPUS_PER_NODE
MAX_VOLUME_GIB = 16_384  # an EBS gp3 volume
# Token counts go to Prometheus, which holds every sample as a float64: exact below 2**53.
MAX_TOKENS_PER_MINUTE = 2**53 - 1
MAX_SLO_MS = 3_600_000  # an hour
MAX_PARAMS_BILLION = 100_000.0  # 100 trillion parameters; the largest models today have 2
MAX_BYTES_PER_ELEMENT = 8  # float64, the widest weight or KV type


def _tenant_namespace(value: str) -> str:
    if value in RESERVED_NAMESPACES or value.startswith(RESERVED_NAMESPACE_PREFIX):
        raise ValueError(f"{value!r} belongs to Kubernetes or the platform, not to a tenant")
    return value


Name = Annotated[str, AfterValidator(_dns1123_label)]
ModelName = Annotated[Name, AfterValidator(_model_name)]
TenantNamespace = Annotated[Name, AfterValidator(_tenant_namespace)]
StorageUri = Annotated[str, AfterValidator(_storage_uri)]
TokenizerSource = Annotated[str, AfterValidator(_tokenizer_source)]
PositiveInt = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]
Replicas = Annotated[int, Field(ge=0, le=INT32_MAX)]
NodeCount = Annotated[int, Field(ge=0, le=MAX_NODES)]
GpuCount = Annotated[int, Field(ge=0, le=MAX_GPUS)]
VolumeGib = Annotated[int, Field(ge=0, le=MAX_VOLUME_GIB)]
TokensPerMinute = Annotated[int, Field(gt=0, le=MAX_TOKENS_PER_MINUTE)]
Milliseconds = Annotated[int, Field(gt=0, le=MAX_SLO_MS)]
BytesPerElement = Annotated[float, Field(gt=0, le=MAX_BYTES_PER_ELEMENT, allow_inf_nan=False)]


class Strict(BaseModel):
    """Base of every config type: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# How the cloud sells a pool's nodes.
Capacity = Literal["spot", "on-demand"]

# The SGLang ClusterServingRuntimes `runtimes/` renders; a model names one of them.
KNOWN_RUNTIMES = (
    "sglang",
    "sglang-tp",
    "sglang-multinode",
    "sglang-lora",
    "sglang-prefill",
    "sglang-decode",
)
# A prefill/decode model's runtime in the catalog: its two roles run on the prefill and decode
# runtimes above, each an InferenceService of its own (`disaggregation`).
PD_RUNTIME = "sglang-pd"
CATALOG_RUNTIMES = (*KNOWN_RUNTIMES, PD_RUNTIME)


class GpuPool(Strict):
    """A node pool of identical GPU nodes in one region."""

    name: Name
    instance_type: str
    gpu_type: str
    gpus_per_node: Annotated[int, Field(gt=0, le=MAX_GPUS_PER_NODE)]
    min_nodes: NodeCount = 0
    max_nodes: Annotated[NodeCount, Field(gt=0)]
    capacity: Capacity = "on-demand"
    root_volume_gib: Annotated[VolumeGib, Field(gt=0)] = 500
    # GPUs kept free for a burst's first replicas: the pool's nodes run placeholder pods of
    # the lowest priority on them, which any serving pod preempts at once, and the cluster
    # autoscaler adds a node for the placeholders it evicted (infra: `m.gpu_headroom`).
    headroom_gpus: GpuCount = 0
    # GiB of each node's volume kept for model weights: KServe's local model cache downloads
    # every model of the pool's GPU type there once, and a new replica loads from the node's
    # disk instead of the model store (radixfleet/render/modelcache.py). 0: no cache.
    model_cache_gib: VolumeGib = 0


class Region(Strict):
    """A cloud region with one Kubernetes cluster and its GPU pools."""

    name: Name
    gpu_pools: list[GpuPool] = Field(min_length=1)


class GpuBudget(Strict):
    """GPUs a tenant is guaranteed of one GPU type, and how many more it may borrow when unused."""

    guaranteed: GpuCount
    borrow: GpuCount = 0


class TokenBudget(Strict):
    """Token-rate budgets in tokens per minute: overall, and optionally per model."""

    tokens_per_minute: TokensPerMinute
    per_model: dict[str, TokensPerMinute] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _per_model_within_the_whole(self) -> TokenBudget:
        above = sorted(m for m, tokens in self.per_model.items() if tokens > self.tokens_per_minute)
        if above:
            raise ValueError(
                f"a model's budget cannot exceed tokens_per_minute: {', '.join(above)}"
            )
        return self


# The one API key a tenant has when its entry lists none: its Secret's `api-key`.
DEFAULT_API_KEY = "api-key"


def require_zone(when: datetime | None, *, name: str) -> None:
    """Refuse a time without a zone (`name` says which field): it would mean a different
    instant in every region."""
    if when is not None and when.utcoffset() is None:
        raise ValueError(f"{name} needs a time zone, e.g. 2027-01-31T00:00:00Z")


class ApiKey(Strict):
    """One of a tenant's API keys, by name: the key in the tenant's Secret that holds it (filled
    by `pulumi up` from the stack's secret config, or by the platform team), never its value.
    A tenant holds several to rotate without a cutover: add the new one, move the clients,
    then remove the old one or let it expire."""

    name: Name
    expires_at: Annotated[datetime, Field(strict=False)] | None = None

    @model_validator(mode="after")
    def _expiry_has_a_zone(self) -> Self:
        require_zone(self.expires_at, name="expires_at")
        return self


class Tenant(Strict):
    """A team sharing the fleet: where its workloads live and what it may use."""

    name: Name
    namespaces: list[TenantNamespace] = Field(min_length=1)
    gpu_budget: dict[str, GpuBudget] = Field(default_factory=dict)
    token_budget: TokenBudget | None = None
    priority: Annotated[int, Field(ge=0, le=1000)] = 100
    api_keys: list[ApiKey] = Field(
        default_factory=lambda: [ApiKey(name=DEFAULT_API_KEY)], min_length=1
    )

    @model_validator(mode="after")
    def _key_names_unique(self) -> Self:
        names = [key.name for key in self.api_keys]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"api_keys: each name once (a Secret has one value a key): {twice}")
        return self


class Slo(Strict):
    """Serving objectives the autoscaler, the canary judge and the failover detector hold to."""

    ttft_p95_ms: Milliseconds
    itl_p95_ms: Milliseconds


class ModelArchitecture(Strict):
    """The numbers of a model that size its GPU memory: weights and KV cache per token."""

    params_billion: Annotated[float, Field(gt=0, le=MAX_PARAMS_BILLION, allow_inf_nan=False)]
    layers: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt
    weight_bytes_per_param: BytesPerElement = 2.0
    kv_bytes_per_element: Annotated[int, Field(gt=0, le=MAX_BYTES_PER_ELEMENT)] = 2

    @property
    def kv_bytes_per_token(self) -> int:
        # K and V for every layer and KV head.
        return self.layers * self.kv_heads * self.head_dim * 2 * self.kv_bytes_per_element

    @property
    def weight_bytes(self) -> int:
        return int(self.params_billion * 1e9 * self.weight_bytes_per_param)


class SecretKeyRef(Strict):
    """A key of a Secret in the tenant's namespace, which the platform team creates: the catalog
    names it, and no manifest or log ever holds its value."""

    name: Name
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)] = "HF_TOKEN"


class LoraAdapter(Strict):
    """A LoRA adapter served on top of a base model, owned by one tenant or (no tenant) shared
    by all of the model's tenants."""

    name: Name
    storage_uri: StorageUri
    tenant: str | None = None

    def seen_by(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant


# SGLang 0.5.23's `--hicache-write-policy` and `--hicache-storage-backend` choices
# (radixfleet/schemas/sglang/server-args.json; tests/test_catalog.py holds them equal).
HicacheWritePolicy = Literal["write_back", "write_through", "write_through_selective"]
HicacheStorageBackend = Literal[
    "file", "sim", "mooncake", "npu_memcache", "hf3fs", "nixl", "aibrix", "dynamic", "eic",
    "simm", "mori", "shm", "tensorcast", "seaweedfs",
]  # fmt: skip


class KvCache(Strict):
    """A tier of KV cache below the GPUs' (SGLang's HiCache): prefixes evicted from the device
    pool stay in the node's host memory and come back over PCIe instead of being computed again.

    - `host_gib`: the host tier of one replica, GiB, split evenly over its ranks (each TP/PP
      rank is a process with a pool of its own); it must be larger than the replica's device
      pool, and the pods a node holds must fit its memory (crosscheck.py).
    - `write_policy`: when the device copies a prefix to the host (SGLang's default,
      `write_through`: as soon as it is computed).
    - `storage_backend`: a third tier (SGLang's storage backends) below host memory. infra
      provides none yet, so the catalog refuses each (infra/README.md, "KV cache tiers").
    """

    host_gib: PositiveInt
    write_policy: HicacheWritePolicy = "write_through"
    storage_backend: HicacheStorageBackend | None = None


class RoleReplicas(Strict):
    """The replica bounds of one role of a prefill/decode model."""

    min_replicas: Replicas = 0
    max_replicas: Annotated[Replicas, Field(gt=0)] = 1

    @model_validator(mode="after")
    def _min_within_max(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above max_replicas "
                             f"{self.max_replicas}")  # fmt: skip
        return self


class Disaggregation(Strict):
    """A model served as a prefill/decode pair (SGLang's `--disaggregation-mode`): one name to
    its tenants, two InferenceServices (`<name>-prefill`, `<name>-decode`) of the same weights,
    and one smg router in PD mode before them. The prefill computes a prompt's KV, the decode
    fetches it over `transfer_backend` and generates; each role scales within its own bounds,
    and both sleep and wake together (radixfleet/controllers/autoscale/pairs.py)."""

    transfer_backend: TransferBackend = DEFAULT_TRANSFER_BACKEND
    prefill: RoleReplicas = Field(default_factory=RoleReplicas)
    decode: RoleReplicas = Field(default_factory=RoleReplicas)


class Model(Strict):
    """One model of the catalog: where its weights are, how it runs, who uses it and where."""

    name: ModelName
    storage_uri: StorageUri
    runtime: str
    gpu_type: str
    gpus_per_replica: PositiveInt = 1
    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    expert_parallel: PositiveInt = 1
    nodes: PositiveInt = 1
    context_length: PositiveInt
    typical_request_tokens: PositiveInt = 2048
    architecture: ModelArchitecture
    slo: Slo
    min_replicas: Replicas = 0
    max_replicas: Annotated[Replicas, Field(gt=0)] = 1
    tenants: list[str] = Field(min_length=1)
    regions: list[str] = Field(min_length=1)
    lora_adapters: list[LoraAdapter] = Field(default_factory=list)
    max_loras_per_batch: PositiveInt = 8
    # A prefill/decode pair (runtime sglang-pd); None: every replica does both.
    disaggregation: Disaggregation | None = None
    profile: str | None = None
    # A CanaryPolicy of the tenant's namespace that judges this model's rollouts
    # (radixfleet/controllers/canary/).
    canary_policy: Name | None = None
    # Where the model's routers load its tokenizer, so the region entry charges each prompt as
    # the model counts it before it is served (radixfleet/dataplane/tokens.py): a Hugging Face
    # repository (`hf://ORG/NAME`, which smg fetches) or a folder in the router's image.
    tokenizer: TokenizerSource | None = None
    # A host-memory tier of KV cache below the GPUs' (KvCache); None: the GPUs' pool alone.
    kv_cache: KvCache | None = None
    # The Secret key holding a hub token, for weights or a tokenizer in a gated repository
    # (`hf://meta-llama/...`): the predictor and the router read it as HF_TOKEN.
    hf_token_secret: SecretKeyRef | None = None
    # Where a pvc:// model's weights' claim comes from (WeightsClaim); only for pvc:// models.
    weights_claim: WeightsClaim | None = None

    @property
    def tokenizer_source(self) -> str | None:
        """The tokenizer named, else the weights' own repository when they come from the hub;
        None: prompts are charged their byte bound until a replica reports its count."""
        if self.tokenizer is not None:
            return self.tokenizer
        return self.storage_uri if self.storage_uri.startswith("hf://") else None

    def for_tenant(self, tenant: str) -> Model:
        """The model as `tenant`'s InferenceService serves it: with only the adapters it owns
        or shares. Each tenant runs its own base, so no tenant's adapter sits in another's pod."""
        adapters = [a for a in self.lora_adapters if a.seen_by(tenant)]
        return self.model_copy(update={"lora_adapters": adapters})


class WeightsClaim(Strict):
    """The PersistentVolumeClaim a `pvc://CLAIM/PATH` model's weights are on, in each namespace
    the model serves in. One of:

    - `storage_class`: `radixfleet render` creates the claim in that class (`pvc_size_gib`:
      the weights and a tenth more; ReadWriteMany when pods on several nodes mount it, as the
      ranks of a multi-node model do, else ReadWriteOnce). The class must provision that mode:
      on AWS, EFS or FSx for Lustre (infra/README.md, "Multi-node models").
    - `existing: true`: the platform team made the claim and filled it; nothing is rendered.

    A pvc:// model without one is refused (crosscheck.py): its pods would wait for a claim
    nobody makes.
    """

    storage_class: Name | None = None
    existing: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        if self.existing == (self.storage_class is not None):
            raise ValueError("give storage_class (render creates the claim) or existing: true")
        return self


class Catalog(Strict):
    """The whole fleet description: the file `inferenceservices/catalog.yaml`."""

    regions: list[Region] = Field(min_length=1)
    tenants: list[Tenant] = Field(min_length=1)
    models: list[Model] = Field(default_factory=list)

    def region(self, name: str) -> Region:
        return next(r for r in self.regions if r.name == name)

    def tenant(self, name: str) -> Tenant:
        return next(t for t in self.tenants if t.name == name)
