"""The quota's Prometheus series, under the names and labels of `radixfleet.metrics_names`.

One registry per process part (the region entry's gate, the controller), so the local fleet can
run several regions in one process. Counters only grow: a settlement that refunds an
over-estimated prompt is not subtracted from `radixfleet_tenant_tokens_total`.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from radixfleet import metrics_names as m
from radixfleet.controllers.quota.state import GpuAccount


def _base(metric: m.Metric) -> str:
    # prometheus_client appends `_total` to counters itself.
    return metric.name.removesuffix("_total") if metric.type == "counter" else metric.name


class TokenMetrics:
    """Tokens charged and requests throttled, per tenant; the entry's `/metrics` serves them."""

    def __init__(self, *, region: str, registry: CollectorRegistry | None = None) -> None:
        self.region = region
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.tokens = self._counter(m.TENANT_TOKENS)
        self.throttled = self._counter(m.TENANT_THROTTLED)
        self.prompts = self._counter(m.PROMPT_COUNTS)
        self.budget = Gauge(
            _base(m.TENANT_TOKEN_BUDGET),
            m.TENANT_TOKEN_BUDGET.help,
            list(m.TENANT_TOKEN_BUDGET.labels),
            registry=self.registry,
        )

    def _counter(self, metric: m.Metric) -> Counter:
        return Counter(_base(metric), metric.help, list(metric.labels), registry=self.registry)

    def charged(self, tenant: str, model: str, *, kind: str, tokens: int) -> None:
        if tokens > 0:
            self.tokens.labels(self.region, tenant, model, kind).inc(tokens)

    def counted(self, model: str, *, by: str) -> None:
        """A prompt counted on admission: `by` its model's tokenizer, or its byte bound."""
        self.prompts.labels(self.region, model, by).inc()

    def throttle(self, tenant: str) -> None:
        self.throttled.labels(self.region, tenant).inc()

    def budgets(self, per_minute: Mapping[str, int]) -> None:
        for tenant, value in per_minute.items():
            self.budget.labels(tenant).set(value)


class GpuMetrics:
    """GPU budgets and commitments per tenant and GPU type, from the controller's accounts."""

    def __init__(self, *, region: str, registry: CollectorRegistry | None = None) -> None:
        self.region = region
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.committed = Gauge(
            _base(m.TENANT_GPUS_COMMITTED),
            m.TENANT_GPUS_COMMITTED.help,
            list(m.TENANT_GPUS_COMMITTED.labels),
            registry=self.registry,
        )
        self.budget = Gauge(
            _base(m.TENANT_GPU_BUDGET),
            m.TENANT_GPU_BUDGET.help,
            list(m.TENANT_GPU_BUDGET.labels),
            registry=self.registry,
        )

    def update(self, accounts: Mapping[str, Mapping[str, GpuAccount]]) -> None:
        for tenant, per_type in accounts.items():
            for gpu, account in per_type.items():
                self.committed.labels(self.region, tenant, gpu).set(account.committed)
                self.budget.labels(tenant, gpu, "guaranteed").set(account.guaranteed)
                self.budget.labels(tenant, gpu, "borrow").set(account.borrow)
