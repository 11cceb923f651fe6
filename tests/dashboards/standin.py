"""A stand-in exporter for the series no process on this machine can export.

It stands in for exporters that cannot run here: NVIDIA's DCGM exporter (needs GPUs),
kube-state-metrics (needs a cluster) and radixfleet's controllers (not exporting yet), across
two regions. Until the emulated SGLang replica (`radixfleet emulate`) is in the tree it also
stands in for SGLang's `/metrics`, with sglang 0.5.23's names, labels and default buckets.

Values are realistic functions of time: counters grow at fixed rates from the moment the exporter
starts, latencies follow log-normal distributions around CALIBRATION.md's numbers, so every
rate, ratio and quantile the dashboards ask for has a value after two scrapes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from radixfleet import metrics_names as m
from radixfleet.config.catalog import Catalog

REGIONS = ("us-east-1", "eu-west-1")
SGLANG_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")


@dataclass(frozen=True)
class Replica:
    """One SGLang replica of a model in a region, with its traffic."""

    region: str
    namespace: str
    model: str
    index: int
    rps: float
    ttft_median_s: float
    itl_median_s: float
    gpus: int

    @property
    def pod(self) -> str:
        return f"{self.model}-predictor-00001-deployment-{self.index}"

    @property
    def instance(self) -> str:
        return f"10.{REGIONS.index(self.region)}.0.{10 + self.index}:8080"


def fleet_replicas() -> list[Replica]:
    """Two regions; the 8B model for two tenants, the 70B one (TP4) for one."""
    out = []
    for region in REGIONS:
        for i in range(2):
            out.append(Replica(region, "team-search", "llama-3-1-8b", i, 3.0, 0.09, 0.008, 1))
            out.append(Replica(region, "team-support", "llama-3-1-8b", 2 + i, 1.5, 0.07, 0.007, 1))
        out.append(Replica(region, "team-search", "llama-3-1-70b", 4, 0.8, 0.35, 0.018, 4))
    return out


def _lognormal_cdf(x: float, median: float, sigma: float = 0.5) -> float:
    return 0.5 * (1 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2))))


class StandinCollector(Collector):
    """Collects every stood-in series at the time of the scrape."""

    def __init__(self, catalog: Catalog, *, with_sglang: bool) -> None:
        self._catalog = catalog
        self._with_sglang = with_sglang
        self._start = time.time()
        self._replicas = fleet_replicas()

    def collect(self) -> Iterator[Metric]:
        elapsed = time.time() - self._start + 1.0
        if self._with_sglang:
            yield from self._sglang(elapsed)
        yield from self._dcgm()
        yield from self._kube_state()
        yield from self._tenants(elapsed)
        yield from self._regions(elapsed)
        yield from self._canary(elapsed)

    # ---- SGLang ----------------------------------------------------------------------------

    def _sglang(self, t: float) -> Iterator[Metric]:
        labels = ["region", "namespace", "instance", "revision", *SGLANG_LABELS]
        fams = {
            "counters": {
                name: CounterMetricFamily(name.removesuffix("_total"), name, labels=labels)
                for name in (
                    m.SGLANG_REQUESTS,
                    m.SGLANG_ABORTED,
                    m.SGLANG_PROMPT_TOKENS,
                    m.SGLANG_GENERATION_TOKENS,
                    m.SGLANG_CACHED_TOKENS,
                )
            },
            "gauges": {
                name: GaugeMetricFamily(name, name, labels=labels)
                for name in (
                    m.SGLANG_RUNNING,
                    m.SGLANG_QUEUE,
                    m.SGLANG_TOKEN_USAGE,
                    m.SGLANG_CACHE_HIT_RATE,
                    m.SGLANG_GEN_THROUGHPUT,
                )
            },
        }
        histograms = []
        for r in self._replicas:
            values = self._label_values(r)
            requests = r.rps * t
            counts = {
                m.SGLANG_REQUESTS: requests,
                m.SGLANG_ABORTED: requests * 0.002,
                m.SGLANG_PROMPT_TOKENS: requests * 1155,
                m.SGLANG_GENERATION_TOKENS: requests * 211,
                m.SGLANG_CACHED_TOKENS: requests * 1155 * 0.55,
            }
            for name, value in counts.items():
                fams["counters"][name].add_metric(values, value)
            gauges = {
                m.SGLANG_RUNNING: 4.0 * r.rps,
                m.SGLANG_QUEUE: 1.0 if r.model.endswith("70b") else 0.0,
                m.SGLANG_TOKEN_USAGE: 0.2 + 0.05 * r.index,
                m.SGLANG_CACHE_HIT_RATE: 0.55,
                m.SGLANG_GEN_THROUGHPUT: 211 * r.rps,
            }
            for name, value in gauges.items():
                fams["gauges"][name].add_metric(values, value)
            histograms += [
                (m.SGLANG_TTFT, m.SGLANG_TTFT_BUCKETS, values, requests, r.ttft_median_s),
                (m.SGLANG_ITL, m.SGLANG_ITL_BUCKETS, values, requests * 210, r.itl_median_s),
                (m.SGLANG_E2E, m.SGLANG_TTFT_BUCKETS, values, requests, r.itl_median_s * 211),
            ]
        yield from fams["counters"].values()
        yield from fams["gauges"].values()
        yield from self._histograms(labels, histograms)

    @staticmethod
    def _label_values(r: Replica) -> list[str]:
        revision = f"{r.model}-predictor-00001"
        return [r.region, r.namespace, r.instance, revision, r.model, "unified", "0", "0", "0"]

    @staticmethod
    def _histograms(
        labels: list[str],
        items: list[tuple[str, tuple[float, ...], list[str], float, float]],
    ) -> Iterator[Metric]:
        fams: dict[str, HistogramMetricFamily] = {}
        for name, bounds, values, count, median in items:
            fam = fams.setdefault(name, HistogramMetricFamily(name, name, labels=labels))
            buckets = [(repr(b), count * _lognormal_cdf(b, median)) for b in bounds]
            buckets.append(("+Inf", count))
            mean = median * math.exp(0.125)  # log-normal mean with sigma 0.5
            fam.add_metric(values, buckets, sum_value=count * mean)
        yield from fams.values()

    # ---- DCGM and kube-state-metrics -------------------------------------------------------

    def _dcgm(self) -> Iterator[Metric]:
        labels = ["region", "gpu", "UUID", "modelName", "Hostname", "namespace", "pod"]
        util = GaugeMetricFamily(m.DCGM_GPU_UTIL, "GPU utilization (in %).", labels=labels)
        memory = GaugeMetricFamily(
            m.DCGM_FB_USED, "Framebuffer memory used (in MiB).", labels=labels
        )
        for r in self._replicas:
            for gpu in range(r.gpus):
                values = [
                    r.region,
                    str(gpu),
                    f"GPU-{r.region}-{r.pod}-{gpu}",
                    "NVIDIA H100 80GB HBM3",
                    f"ip-10-{REGIONS.index(r.region)}-0-{r.index}",
                    r.namespace,
                    r.pod,
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
        pods = [(r.region, r.namespace, r.pod, r.gpus, "Running") for r in self._replicas]
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
