"""The Tenant custom resource's spec as a type, and its conversion to the catalog's `Tenant`.

The CRD (`crd.py`, rendered to `deploy/crds/`) is generated from these types, in camelCase;
the decision layer reads the catalog's `radixfleet.config.Tenant`, so that the same decisions
drive a cluster (from Tenant objects) and the local fleet (from `catalog.yaml`). API keys are
never in the spec: it names Secrets that hold them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from radixfleet.config import Tenant
from radixfleet.config.catalog import (
    DEFAULT_API_KEY,
    GpuBudget,
    Name,
    TenantNamespace,
    TokenBudget,
    require_zone,
)
from radixfleet.config.gpus import GPU_TYPES
from radixfleet.kit.crd import Crd
from radixfleet.labels import GROUP

API_VERSION = "v1alpha1"
KIND = "Tenant"
PLURAL = "tenants"
CRD_NAME = f"{PLURAL}.{GROUP}"

# The Secret key that holds an API key when a reference names none (the catalog's default).
DEFAULT_SECRET_KEY = DEFAULT_API_KEY
# The one ResourceQuota the controller owns in each tenant namespace.
QUOTA_NAME = "radixfleet-gpus"
GPU_QUOTA_RESOURCE = "requests.nvidia.com/gpu"  # ResourceQuota accepts only `requests.` here
DEFAULT_PRIORITY = 100

# What the API server holds of names the catalog's validators check (a DNS label, a Secret's
# name): their lengths and, for a namespace, its form.
LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAMESPACE = Crd({"maxLength": 63, "pattern": LABEL_PATTERN})
_BUDGET_CEILING = Crd({"maximum": 100000})  # far above any fleet: a typo, not a budget
_KNOWN_GPUS = ", ".join(GPU_TYPES)
_GPU_BUDGET = Crd(
    {
        "maxProperties": 16,
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(t, t in [{', '.join(repr(t) for t in GPU_TYPES)}])",
                "message": f"unknown GPU type; known: {_KNOWN_GPUS}",
            }
        ],
    },
    default_from=dict,
)
# The platform grants reads of a tenant's key Secrets in its own namespaces only
# (radixfleet/render/tenant_access.py): a key elsewhere could never be read.
_KEYS_IN_NAMESPACES: JsonDict = {
    "rule": "!has(self.apiKeys) || self.apiKeys.all(k, k.namespace in self.namespaces)",
    "message": "an API key's Secret must be in one of the tenant's namespaces",
}


class Wire(BaseModel):
    """Base of the spec types: camelCase on the wire as in the CRD, unknown keys rejected,
    nothing coerced (a budget of "8" is as wrong here as the CRD's schema says)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, alias_generator=to_camel, populate_by_name=True
    )


class WireGpuBudget(Wire):
    guaranteed: Annotated[int, Field(ge=0), _BUDGET_CEILING]
    borrow: Annotated[int, Field(ge=0), _BUDGET_CEILING] = 0


class WireTokenBudget(Wire):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.perModel)"
                    " || self.perModel.all(m, self.perModel[m] <= self.tokensPerMinute)",
                    "message": "a model's token budget cannot exceed the tenant's tokensPerMinute",
                }
            ]
        }
    )

    tokens_per_minute: Annotated[int, Field(gt=0)]
    per_model: Annotated[dict[str, Annotated[int, Field(gt=0)]], Crd({"maxProperties": 64})] = (
        Field(default_factory=dict)
    )

    @model_validator(mode="after")
    def _models_within_tenant(self) -> Self:
        if above := sorted(m for m, v in self.per_model.items() if v > self.tokens_per_minute):
            raise ValueError(f"a model's token budget cannot exceed tokensPerMinute: {above}")
        return self


class SecretKeyRef(Wire):
    """A Secret key holding one API key of the tenant, and when it stops being accepted. A
    tenant holds several to rotate without a cutover: add the new one, move the clients, then
    remove the old one or let it expire. The reference is the key's name (`str`), in the
    status, the logs and the metrics; the key itself never is."""

    name: Annotated[Name, Crd({"maxLength": 253})]
    namespace: Annotated[Name, Crd({"maxLength": 63})]
    key: Annotated[str, Crd({"maxLength": 253})] = DEFAULT_SECRET_KEY
    # RFC 3339 on the wire ("2027-01-31T00:00:00Z"), as Kubernetes writes times: parsed here
    # despite the spec's strictness. A time without a zone is refused: it would mean any.
    expires_at: Annotated[datetime, Field(strict=False)] | None = None

    @model_validator(mode="after")
    def _expiry_has_a_zone(self) -> Self:
        require_zone(self.expires_at, name="expiresAt")
        return self

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"


class TenantSpec(Wire):
    """What one team may use: namespaces, GPUs per GPU type, tokens per minute, API keys."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_KEYS_IN_NAMESPACES]})

    namespaces: Annotated[
        list[Annotated[TenantNamespace, _NAMESPACE]],
        Crd({"maxItems": 64, "x-kubernetes-list-type": "set"}),
    ] = Field(min_length=1)
    gpu_budget: Annotated[dict[str, WireGpuBudget], _GPU_BUDGET] = Field(default_factory=dict)
    token_budget: WireTokenBudget | None = None
    priority: Annotated[int, Field(ge=0, le=1000)] = DEFAULT_PRIORITY
    api_keys: Annotated[
        list[SecretKeyRef], Crd({"maxItems": 16, "x-kubernetes-list-type": "atomic"})
    ] = Field(default_factory=list)

    def to_tenant(self, name: str) -> Tenant:
        """The catalog's view of this spec, which the decision layer reads."""
        tokens = self.token_budget
        return Tenant(
            name=name,
            namespaces=list(self.namespaces),
            gpu_budget={
                gpu: GpuBudget(guaranteed=b.guaranteed, borrow=b.borrow)
                for gpu, b in self.gpu_budget.items()
            },
            token_budget=None
            if tokens is None
            else TokenBudget(
                tokens_per_minute=tokens.tokens_per_minute, per_model=dict(tokens.per_model)
            ),
            priority=self.priority,
        )

    @classmethod
    def from_tenant(
        cls, tenant: Tenant, *, api_keys: list[SecretKeyRef] | None = None
    ) -> TenantSpec:
        """The Tenant object a catalog entry becomes (`radixfleet render` may write these)."""
        tokens = tenant.token_budget
        return cls(
            namespaces=list(tenant.namespaces),
            gpu_budget={
                gpu: WireGpuBudget(guaranteed=b.guaranteed, borrow=b.borrow)
                for gpu, b in tenant.gpu_budget.items()
            },
            token_budget=None
            if tokens is None
            else WireTokenBudget(
                tokens_per_minute=tokens.tokens_per_minute, per_model=dict(tokens.per_model)
            ),
            priority=tenant.priority,
            api_keys=api_keys or [],
        )
