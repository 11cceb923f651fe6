"""The emulator's /metrics: SGLang 0.5.23's `sglang:*` names, types and scheduler labels.

Gauges and counters are read from the replica model at scrape time (a custom collector, so the
request path pays nothing for them); histograms are counted as requests finish.
With `--enable-hierarchical-cache` the HiCache families come too (the host pool's gauges, its
backups, `cached_tokens_total` split by tier, and with a storage backend its prefetch hits), as
SGLang creates them only then. Every family carries the scheduler labels `model_name,
engine_type, tp_rank, pp_rank, moe_ep_rank`; the conformance test checks every exported name
and type against `radixfleet/schemas/sglang/metrics.json`.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from radixfleet import metrics_names as m
from radixfleet.emulator.hicache import HiCacheConfig
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaStats, Request

LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")

TTFT_BUCKETS = m.EMULATED_TTFT_BUCKETS
ITL_BUCKETS = m.EMULATED_ITL_BUCKETS
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
               100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)  # fmt: skip
TOKEN_BUCKETS = (16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0)


class SchedulerCollector(Collector):
    """Yields the scheduler's gauges and counters from a fresh model snapshot per scrape."""

    def __init__(
        self,
        *,
        stats: Callable[[], ReplicaStats],
        profile: ReplicaProfile,
        labels: dict[str, str],
        hicache: HiCacheConfig | None = None,
    ) -> None:
        self._stats = stats
        self._profile = profile
        self._labels = labels
        self._hicache = hicache

    def collect(self) -> Iterator[Metric]:
        """One family per SGLang metric, each with the scheduler labels."""
        stats = self._stats()
        for name, doc, value in self._gauges(stats):
            family = GaugeMetricFamily(name, doc, labels=LABELS)
            family.add_metric(list(self._labels.values()), value)
            yield family
        for name, doc, value in self._counters(stats):
            counter = CounterMetricFamily(name, doc, labels=LABELS)
            counter.add_metric(list(self._labels.values()), value)
            yield counter
        yield self._cached_tokens(stats)
        if self._hicache is not None:
            yield from self._hicache_families(stats, self._hicache)

    def _cached_tokens(self, stats: ReplicaStats) -> Metric:
        """`cached_tokens_total` by `cache_source`. SGLang adds to a source's series only when
        a request hit that tier, so `host` and `storage` appear with their first hit; `device`
        is there from the start, as it always was here."""
        totals = stats.counters
        family = CounterMetricFamily(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens by source (device/host/storage).",
            labels=(*LABELS, "cache_source"),
        )
        sources = (("device", totals.device_cached_tokens_total),
                   ("host", totals.host_cached_tokens_total),
                   ("storage", totals.storage_cached_tokens_total))  # fmt: skip
        for source, value in sources:
            if source == "device" or value > 0:
                family.add_metric([*self._labels.values(), source], value)
        return family

    def _hicache_families(self, stats: ReplicaStats, hicache: HiCacheConfig) -> Iterator[Metric]:
        """What SGLang exports only with `--enable-hierarchical-cache`: the host pool's gauges
        and backups, and with a storage backend the tokens its prefetches hit."""
        values = list(self._labels.values())
        for name, doc, value in (
            ("sglang:hicache_host_used_tokens",
             "Number of tokens currently used in the host KV cache.", stats.host_used_tokens),
            ("sglang:hicache_host_total_tokens", "Total capacity of the host KV cache in tokens.",
             stats.host_total_tokens),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, doc, labels=LABELS)
            gauge.add_metric(values, value)
            yield gauge
        backup = CounterMetricFamily(
            "sglang:hicache_backup_tokens_total",
            "The number of tokens backed up from GPU to local host memory.",
            labels=(*LABELS, "pool"),
        )
        backup.add_metric([*values, "kv"], stats.counters.backup_tokens_total)
        yield backup
        if hicache.storage_backend is not None:
            hits = CounterMetricFamily(
                "sglang:storage_prefetch_hit_tokens_total",
                "Storage-hit tokens returned by an L3 query before prefetch.",
                labels=LABELS,
            )
            hits.add_metric(values, stats.counters.storage_cached_tokens_total)
            yield hits

    def _gauges(self, stats: ReplicaStats) -> list[tuple[str, str, float]]:
        profile = self._profile
        kv_gb = profile.kv_capacity_tokens * profile.kv_bytes_per_token / 1e9 / profile.gpu_count
        return [
            ("sglang:num_running_reqs", "The number of running requests.", stats.num_running_reqs),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
             stats.num_queue_reqs),
            ("sglang:num_used_tokens", "The number of used tokens.", stats.kv_used_tokens),
            ("sglang:token_usage", "The token usage.", stats.token_usage),
            ("sglang:full_token_usage", "The token usage of full attention layers.",
             stats.token_usage),
            ("sglang:kv_used_tokens", "KV tokens in use.", stats.kv_used_tokens),
            ("sglang:kv_evictable_tokens", "Cached KV tokens that can be evicted.",
             stats.kv_evictable_tokens),
            ("sglang:kv_available_tokens", "Free KV tokens.", stats.kv_available_tokens),
            ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool.",
             stats.max_total_num_tokens),
            ("sglang:cache_hit_rate", "The prefix cache hit rate.", stats.cache_hit_rate),
            ("sglang:gen_throughput", "The generation throughput (token/s).",
             stats.gen_throughput),
            ("sglang:decode_sum_seq_lens", "The sum of all sequence lengths in decode.",
             stats.decode_sum_seq_lens),
            ("sglang:context_len", "Maximum context length.", profile.context_length),
            ("sglang:page_size", "KV cache page size.", profile.page_size),
            ("sglang:num_retracted_reqs", "The number of retracted requests.", 0),
            ("sglang:num_paused_reqs", "The number of paused requests.", 0),
            ("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", 1),
            ("sglang:weight_memory_usage_gb", "Weight memory per GPU in GB.",
             profile.weights_gb / profile.gpu_count),
            ("sglang:kv_cache_memory_usage_gb", "KV cache memory per GPU in GB.", kv_gb),
        ]  # fmt: skip

    @staticmethod
    def _counters(stats: ReplicaStats) -> list[tuple[str, str, float]]:
        totals = stats.counters
        return [
            ("sglang:num_requests_total", "Number of requests processed.",
             totals.num_requests_total),
            ("sglang:num_aborted_requests_total", "Number of requests aborted.",
             totals.num_aborted_requests_total),
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
             totals.prompt_tokens_total),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.",
             totals.generation_tokens_total),
            ("sglang:evicted_tokens_total", "Number of evicted tokens.",
             totals.evicted_tokens_total),
        ]  # fmt: skip


class BucketHistogram:
    """Bucket counts of one unlabelled series; observing many equal values costs O(log n)."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...]) -> None:
        self.name, self.doc, self.edges = name, doc, buckets
        self.counts = [0] * (len(buckets) + 1)  # the last slot is +Inf
        self.total = 0.0

    def observe(self, value: float, *, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.edges, value)] += times
        self.total += value * times

    def family(self, labels: dict[str, str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=list(labels))
        cumulative, running = [], 0
        for edge, count in zip((*self.edges, math.inf), self.counts, strict=True):
            running += count
            cumulative.append(("+Inf" if math.isinf(edge) else repr(float(edge)), running))
        family.add_metric(list(labels.values()), cumulative, self.total)
        return family


class RequestHistograms(Collector):
    """Latency and size histograms, observed once per finished request.

    Kept by hand rather than with prometheus_client's Histogram so that no `_created` series
    appear (SGLang's names are the contract) and a request's token gaps count in one step.
    """

    def __init__(self, *, labels: dict[str, str]) -> None:
        self._labels = labels
        self.ttft = BucketHistogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TTFT_BUCKETS)  # fmt: skip
        self.itl = BucketHistogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS)  # fmt: skip
        self.e2e = BucketHistogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds", E2E_BUCKETS)  # fmt: skip
        self.queue = BucketHistogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", E2E_BUCKETS
        )
        self.prompt = BucketHistogram(
            "sglang:prompt_tokens_histogram", "Histogram of prompt token length.", TOKEN_BUCKETS
        )
        self.generation = BucketHistogram(
            "sglang:generation_tokens_histogram", "Histogram of generation token length.",
            TOKEN_BUCKETS)  # fmt: skip
        self._all = (self.ttft, self.itl, self.e2e, self.queue, self.prompt, self.generation)

    def observe(self, request: Request) -> None:
        """Record one finished request."""
        if request.ttft is not None:
            self.ttft.observe(request.ttft)
        if request.queue_time is not None:
            self.queue.observe(request.queue_time)
        if request.e2e_latency is not None:
            self.e2e.observe(request.e2e_latency)
        itl = request.mean_itl
        if itl is not None:
            # One observation per token gap, as SGLang records them; the gaps share the mean.
            self.itl.observe(itl, times=request.spec.output_tokens - 1)
        self.prompt.observe(request.spec.prompt_tokens)
        self.generation.observe(request.generated)

    def collect(self) -> Iterator[Metric]:
        """One histogram family each, with the scheduler labels."""
        for histogram in self._all:
            yield histogram.family(self._labels)


class HttpResponses(Collector):
    """`sglang:http_responses_total` by endpoint, status code and method.

    SGLang's HTTP middleware counts every response this way, health checks and scrapes
    included; the canary's error rate reads the 5xx share of the generation endpoints from it.
    Its labels are the middleware's own: the HTTP process has no scheduler labels.
    """

    NAME = "sglang:http_responses_total"
    LABELS = ("endpoint", "status_code", "method")

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def count(self, *, endpoint: str, status: int, method: str) -> None:
        """One response sent."""
        self.counts[(endpoint, str(status), method)] += 1

    def collect(self) -> Iterator[Metric]:
        """The counter family, one series per (endpoint, status code, method) seen."""
        family = CounterMetricFamily(
            self.NAME, "Total number of HTTP responses by endpoint and status code",
            labels=self.LABELS,
        )  # fmt: skip
        for labels, value in sorted(self.counts.items()):
            family.add_metric(list(labels), value)
        yield family


@dataclass(frozen=True)
class EmulatorMetrics:
    """The emulator's registry and the collectors the request path feeds."""

    registry: CollectorRegistry
    histograms: RequestHistograms
    responses: HttpResponses
    labels: dict[str, str]  # the scheduler labels, for the families a role adds


def build_registry(
    *,
    stats: Callable[[], ReplicaStats],
    profile: ReplicaProfile,
    model_name: str,
    hicache: HiCacheConfig | None = None,
    engine_type: str = "unified",
) -> EmulatorMetrics:
    """A registry holding the emulator's families only (several emulators may share a process)."""
    labels = {
        "model_name": model_name,
        "engine_type": engine_type,
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SchedulerCollector(stats=stats, profile=profile, labels=labels, hicache=hicache)
    )
    histograms = RequestHistograms(labels=labels)
    registry.register(histograms)
    responses = HttpResponses()
    registry.register(responses)
    return EmulatorMetrics(registry, histograms, responses, labels)
