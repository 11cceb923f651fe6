"""The token gate of a region entry in a cluster: the Tenants, their keys and budgets, re-read.

The entry (`radixfleet entry run`) runs several replicas behind one Service, and each keeps its
own ledger: a shared ledger would put a round trip to a store on every request's path. So each
replica enforces its share of every budget (the budget divided by the replica count, rounded
up). The load balancer spreads a tenant's requests over the replicas, so the tenant gets about
its whole budget; a tenant whose requests all land on one replica is held to that replica's
share, which errs on the side of the budget.

What a replica's buckets are owed outlives it: each writes it into the entry's ledger ConfigMap
every few seconds, and the replicas after it take on the debts of one gone (`keep`,
radixfleet/controllers/quota/carry.py). A restart, a rollout or an OOM kill forgives no tenant's
debt.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota import carry
from radixfleet.controllers.quota.carry import LedgerStore
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.kube import TENANTS, KubeLedgerStore, KubeSecrets, KubeTenants
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.controllers.quota.metrics import TokenMetrics
from radixfleet.controllers.quota.observe import api_keys, tenant_object
from radixfleet.controllers.quota.ports import Secrets, Tenants
from radixfleet.controllers.quota.shares import ConcurrencyShares
from radixfleet.dataplane.gate import CountPrompt, ModelOf
from radixfleet.kit.errors import KubeError
from radixfleet.kit.rbac import TENANT_NAMESPACES, PolicyRule, rule
from radixfleet.platform import UPSTREAM_CONNECTIONS

log = logging.getLogger(__name__)

RULES: tuple[PolicyRule, ...] = (
    TENANTS.rule("list"),
    # API keys: one Secret at a time, by the name a Tenant gives (never listed).
    rule("", "secrets", "get", scope=TENANT_NAMESPACES),
    *KubeLedgerStore.RULES,
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
    """The quota's TokenGate, fed from the cluster's Tenants and their key Secrets; what its
    buckets are owed kept in `ledger` under this replica's name."""

    def __init__(
        self,
        tenants: Tenants,
        secrets: Secrets,
        *,
        replicas: int,
        region: str,
        ledger: LedgerStore | None = None,
        replica: str = "",
        wall: Callable[[], float] = time.time,
        shares: ConcurrencyShares | None = None,
    ) -> None:
        self.tenants, self.secrets = tenants, secrets
        self.replicas = replicas
        self.metrics = TokenMetrics(region=region)
        self.gate = TokenGate(TokenLedger(budgets={}), keys={}, metrics=self.metrics,
                              shares=shares or ConcurrencyShares())  # fmt: skip
        self.ledger, self.replica, self.wall = ledger, replica, wall
        self._synced = self._carried = self._written = False

    def install(
        self, app: web.Application, *, model_of: ModelOf | None = None,
        count: CountPrompt | None = None,
    ) -> None:  # fmt: skip
        self.gate.install(app, model_of=model_of, count=count)

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
        self._synced = True  # the budgets debts are taken on against
        return {o.name: list(o.tenant.namespaces) for o in parsed if o.tenant}

    async def keep(self, *, interval_s: float = carry.INTERVAL_S) -> None:
        """Until cancelled: every `interval_s`, take on the debts of replicas gone and write what
        this replica is owed; once more, as its last word, when cancelled (the entry's stop)."""
        if self.ledger is None:
            return
        try:
            while True:
                await self._carry()
                await asyncio.sleep(interval_s)
        except asyncio.CancelledError:
            try:
                if self._carried:  # else the entry under its name may be a previous life's
                    await self._write(final=True)
            except KubeError as error:
                log.warning("entry ledger: %s; what this replica is owed is lost", error)
            raise

    async def _carry(self) -> None:
        """One pass, once the budgets are known; a failed read or write is retried at the next
        (the debts stay in memory)."""
        assert self.ledger is not None
        if not self._synced:
            return
        try:
            stored = await asyncio.to_thread(self.ledger.read)
            step = carry.plan(stored, own=self.replica, wall=self.wall(), first=not self._carried)
            if step.claim:
                if not await asyncio.to_thread(self.ledger.claim, step.version, step.claim):
                    return  # written to since it was read: read it again at the next pass
                for orphan in step.adopted:
                    carry.take_on(self.gate.ledger, orphan, now=self.gate.clock(), wall=self.wall())
                log.info(
                    "took on the token debts of entry replicas gone: %s", ", ".join(step.claim)
                )
            self._carried = True  # from now on this replica's own entry is its own to write
            await self._write(final=False)
        except KubeError as error:
            log.warning("entry ledger: %s; again in %.0f s", error, carry.INTERVAL_S)

    async def _write(self, *, final: bool) -> None:
        """This replica's entry: what it is owed, or none (removed once nothing is)."""
        assert self.ledger is not None
        owed = carry.owed(self.gate.ledger, now=self.gate.clock(), wall=self.wall())
        if not owed.tokens and not self._written:
            return
        text = carry.Owed(owed.at, owed.tokens, final=final).to_wire() if owed.tokens else None
        await asyncio.to_thread(self.ledger.write, self.replica, text)
        self._written = text is not None


def build(
    api_client: Any, replicas: int, region: str, *, upstream_connections: int = UPSTREAM_CONNECTIONS
) -> ClusterGate:
    """The entry gate the quota plug-in offers (`ControllerPlugin.entry_gate`); this replica's
    debts kept under its pod's name (the host name Kubernetes gives it); each tenant's share of
    the entry's `upstream_connections`."""
    return ClusterGate(KubeTenants(api_client), KubeSecrets(api_client), replicas=replicas,
                       region=region, ledger=KubeLedgerStore(api_client),
                       replica=socket.gethostname(),
                       shares=ConcurrencyShares(pool=upstream_connections))  # fmt: skip
