"""A stand-in exporter for the series no process on this machine can export.

It stands in for exporters that cannot run here: NVIDIA's DCGM exporter (needs GPUs),
kube-state-metrics (needs a cluster) and radixfleet's controllers (not exporting yet). Its pods
and GPUs are those of the emulated replicas (fleet.py), so GPU and SGLang panels tell one story.
Values are realistic and constant, except counters, which grow at fixed rates from the moment
the exporter starts, so every rate and ratio the dashboards ask for has a value after two
scrapes. Every series carries `region`, as each region's exporters would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from radixfleet import metrics_names as m
from radixfleet.config.catalog import Catalog
from tests.dashboards.fleet import PLACEMENTS

REGIONS = ("us-east-1", "eu-west-1")


@dataclass(frozen=True)
class Pod:
    """The pod of one emulated replica, with the GPUs its model needs."""

    region: str
    namespace: str
    name: str
    index: int
    gpus: int


def fleet_pods(catalog: Catalog) -> list[Pod]:
    """One pod per emulated replica, GPUs as the catalog gives its model."""
    gpus = {model.name: model.gpus_per_replica for model in catalog.models}
    return [
        Pod(p.region, p.namespace, f"{p.model}-predictor-00001-deployment-{i}", i, gpus[p.model])
        for i, p in enumerate(PLACEMENTS)
    ]


class StandinCollector(Collector):
    """Collects every stood-in series at the time of the scrape."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._start = time.time()
        self._pods = fleet_pods(catalog)

    def collect(self) -> Iterator[Metric]:
        elapsed = time.time() - self._start + 1.0
        yield from self._dcgm()
        yield from self._kube_state()
        yield from self._tenants(elapsed)
        yield from self._regions(elapsed)
        yield from self._canary(elapsed)

    # ---- DCGM and kube-state-metrics -------------------------------------------------------

    def _dcgm(self) -> Iterator[Metric]:
        labels = ["region", "gpu", "UUID", "modelName", "Hostname", "namespace", "pod"]
        util = GaugeMetricFamily(m.DCGM_GPU_UTIL, "GPU utilization (in %).", labels=labels)
        memory = GaugeMetricFamily(
            m.DCGM_FB_USED, "Framebuffer memory used (in MiB).", labels=labels
        )
        for r in self._pods:
            for gpu in range(r.gpus):
                values = [
                    r.region,
                    str(gpu),
                    f"GPU-{r.region}-{r.name}-{gpu}",
                    "NVIDIA H100 80GB HBM3",
                    f"ip-10-{REGIONS.index(r.region)}-0-{r.index}",
                    r.namespace,
                    r.name,
                ]
                util.add_metric(values, 55.0 + 10 * r.index + 5 * gpu)
                memory.add_metric(values, 71_000.0)
        yield util
        yield memory

    def _kube_state(self) -> Iterator[Metric]:
        phase = GaugeMetricFamily(
            m.KUBE_POD_PHASE,
            "The pods current phase.",
            labels=["region", "namespace", "pod", "phase"],
        )
        requests = GaugeMetricFamily(
            m.KUBE_POD_REQUESTS,
            "The number of requested request resource by a container.",
            labels=["region", "namespace", "pod", "container", "node", "resource", "unit"],
        )
        pods = [(r.region, r.namespace, r.name, r.gpus, "Running") for r in self._pods]
        # A scale-up waiting for a GPU node in eu-west-1.
        pods.append(
            ("eu-west-1", "team-search", "llama-3-1-8b-predictor-00001-deployment-9", 1, "Pending")
        )
        for region, ns, pod, gpus, current in pods:
            for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                phase.add_metric([region, ns, pod, p], 1.0 if p == current else 0.0)
            node = "" if current == "Pending" else f"ip-{region}-gpu"
            requests.add_metric(
                [region, ns, pod, "kserve-container", node, m.KUBE_GPU_RESOURCE, "integer"], gpus
            )
        ns_labels = GaugeMetricFamily(
            m.KUBE_NAMESPACE_LABELS,
            "Kubernetes labels converted to Prometheus labels.",
            labels=["region", "namespace", m.KUBE_TENANT_LABEL],
        )
        for region in REGIONS:
            for tenant in self._catalog.tenants:
                for ns in tenant.namespaces:
                    ns_labels.add_metric([region, ns, tenant.name], 1.0)
        yield from (phase, requests, ns_labels)

    # ---- radixfleet's controllers ----------------------------------------------------------

    def _tenants(self, t: float) -> Iterator[Metric]:
        tokens = CounterMetricFamily(
            "radixfleet_tenant_tokens", m.TENANT_TOKENS.help, labels=list(m.TENANT_TOKENS.labels)
        )
        throttled = CounterMetricFamily(
            "radixfleet_tenant_throttled_requests",
            m.TENANT_THROTTLED.help,
            labels=list(m.TENANT_THROTTLED.labels),
        )
        budget = GaugeMetricFamily(
            m.TENANT_TOKEN_BUDGET.name,
            m.TENANT_TOKEN_BUDGET.help,
            labels=["region", *m.TENANT_TOKEN_BUDGET.labels],
        )
        gpu_budget = GaugeMetricFamily(
            m.TENANT_GPU_BUDGET.name,
            m.TENANT_GPU_BUDGET.help,
            labels=["region", *m.TENANT_GPU_BUDGET.labels],
        )
        committed = GaugeMetricFamily(
            m.TENANT_GPUS_COMMITTED.name,
            m.TENANT_GPUS_COMMITTED.help,
            labels=list(m.TENANT_GPUS_COMMITTED.labels),
        )
        for i, tenant in enumerate(self._catalog.tenants):
            per_minute = tenant.token_budget.tokens_per_minute if tenant.token_budget else 0
            for region in REGIONS:
                # Each region uses a share of the budget; the first tenant is near its limit.
                share = 0.46 if i == 0 else 0.2
                for kind, part in (("prompt", 0.85), ("completion", 0.15)):
                    rate = per_minute * share * part / 60
                    tokens.add_metric([region, tenant.name, "llama-3-1-8b", kind], rate * t)
                throttled.add_metric([region, tenant.name], (0.4 if i == 0 else 0.0) * t)
                budget.add_metric([region, tenant.name], float(per_minute))
                for gpu_type, b in tenant.gpu_budget.items():
                    gpu_budget.add_metric(
                        [region, tenant.name, gpu_type, "guaranteed"], b.guaranteed
                    )
                    gpu_budget.add_metric([region, tenant.name, gpu_type, "borrow"], b.borrow)
                    committed.add_metric([region, tenant.name, gpu_type], b.guaranteed / 2)
        yield from (tokens, throttled, budget, gpu_budget, committed)

    def _regions(self, t: float) -> Iterator[Metric]:
        weight = GaugeMetricFamily(
            m.REGION_WEIGHT.name, m.REGION_WEIGHT.help, labels=list(m.REGION_WEIGHT.labels)
        )
        healthy = GaugeMetricFamily(m.REGION_HEALTHY.name, m.REGION_HEALTHY.help, labels=["region"])
        events = CounterMetricFamily(
            "radixfleet_failover_events",
            m.FAILOVER_EVENTS.help,
            labels=list(m.FAILOVER_EVENTS.labels),
        )
        for i, region in enumerate(REGIONS):
            for model in ("llama-3-1-8b", "llama-3-1-70b"):
                weight.add_metric([region, model], 128.0 - 28 * i)
            healthy.add_metric([region], 1.0)
            events.add_metric([region, "out"], float(i))
            events.add_metric([region, "back"], float(i))
        yield from (weight, healthy, events)

    def _canary(self, t: float) -> Iterator[Metric]:
        key = ["team-search", "llama-3-1-8b"]
        weight = GaugeMetricFamily(
            m.CANARY_WEIGHT.name, m.CANARY_WEIGHT.help, labels=["region", *m.CANARY_WEIGHT.labels]
        )
        weight.add_metric(["us-east-1", *key], 20.0)
        value = GaugeMetricFamily(
            m.CANARY_CHECK_VALUE.name,
            m.CANARY_CHECK_VALUE.help,
            labels=list(m.CANARY_CHECK_VALUE.labels),
        )
        failed = GaugeMetricFamily(
            m.CANARY_CHECK_FAILED.name,
            m.CANARY_CHECK_FAILED.help,
            labels=list(m.CANARY_CHECK_FAILED.labels),
        )
        stable = {
            "ttft_p95": 0.21,
            "itl_p95": 0.012,
            "error_ratio": 0.002,
            "prefix_hit_ratio": 0.55,
        }
        for check, v in stable.items():
            value.add_metric([*key, check, "stable"], v)
            value.add_metric([*key, check, "canary"], v * 1.04)
            failed.add_metric([*key, check], 0.0)
        decisions = CounterMetricFamily(
            "radixfleet_canary_decisions",
            m.CANARY_DECISIONS.help,
            labels=list(m.CANARY_DECISIONS.labels),
        )
        decisions.add_metric([*key, "advance"], 1 + t // 10)
        decisions.add_metric([*key, "hold"], 1.0)
        desired = GaugeMetricFamily(
            m.DESIRED_REPLICAS.name, m.DESIRED_REPLICAS.help, labels=list(m.DESIRED_REPLICAS.labels)
        )
        desired.add_metric(key, 2.0)
        desired.add_metric(["team-support", "llama-3-1-8b"], 2.0)
        desired.add_metric(["team-search", "llama-3-1-70b"], 1.0)
        yield from (weight, value, failed, decisions, desired)
