"""The token gate of a region entry in a cluster: the Tenants, their keys and budgets, re-read.

The entry (`radixfleet entry run`) runs several replicas behind one Service, and each keeps its
own ledger: a shared ledger would put a round trip to a store on every request's path. So each
replica enforces its share of every budget (the budget divided by the replica count, rounded
up). The load balancer spreads a tenant's requests over the replicas, so the tenant gets about
its whole budget; a tenant whose requests all land on one replica is held to that replica's
share, which errs on the side of the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from policies.quota.gate import TokenGate
from policies.quota.kube import TENANTS, KubeSecrets, KubeTenants
from policies.quota.ledger import TokenLedger
from policies.quota.metrics import TokenMetrics
from policies.quota.observe import api_keys, tenant_object
from policies.quota.ports import Secrets, Tenants
from radixfleet.config.catalog import TokenBudget
from radixfleet.entry.gate import ModelOf
from radixfleet.kit.rbac import TENANT_NAMESPACES, PolicyRule, rule

RULES: tuple[PolicyRule, ...] = (
    TENANTS.rule("list"),
    # API keys: one Secret at a time, by the name a Tenant gives (never listed).
    rule("", "secrets", "get", scope=TENANT_NAMESPACES),
)


def per_replica(budget: TokenBudget | None, replicas: int) -> TokenBudget | None:
    """One entry replica's share of a budget (None: unlimited stays unlimited)."""
    if budget is None or replicas <= 1:
        return budget
    return TokenBudget(
        tokens_per_minute=math.ceil(budget.tokens_per_minute / replicas),
        per_model={m: math.ceil(t / replicas) for m, t in budget.per_model.items()},
    )


class ClusterGate:
    """The quota's TokenGate, fed from the cluster's Tenants and their key Secrets."""

    def __init__(self, tenants: Tenants, secrets: Secrets, *, replicas: int, region: str) -> None:
        self.tenants, self.secrets = tenants, secrets
        self.replicas = replicas
        self.metrics = TokenMetrics(region=region)
        self.gate = TokenGate(TokenLedger(budgets={}), keys={}, metrics=self.metrics)

    def install(self, app: web.Application, *, model_of: ModelOf | None = None) -> None:
        self.gate.install(app, model_of=model_of)

    def tenant_of(self, request: web.Request) -> str | None:
        return self.gate.tenant_of(request)

    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def sync(self) -> Mapping[str, Sequence[str]]:
        """Re-read the Tenants and their keys; each valid tenant's namespaces."""
        found = self.tenants.list()
        parsed = [obj for obj, _ in map(tenant_object, found) if obj.tenant is not None]
        budgets = {o.name: per_replica(o.tenant.token_budget, self.replicas)
                   for o in parsed if o.tenant}  # fmt: skip
        keys = api_keys(found, self.secrets)
        self.gate.reload(budgets=budgets, keys=keys.tenants, expiries=keys.expiries)
        return {o.name: list(o.tenant.namespaces) for o in parsed if o.tenant}


def build(api_client: Any, replicas: int, region: str) -> ClusterGate:
    """The entry gate the quota plug-in offers (`ControllerPlugin.entry_gate`)."""
    return ClusterGate(KubeTenants(api_client), KubeSecrets(api_client), replicas=replicas,
                       region=region)  # fmt: skip
