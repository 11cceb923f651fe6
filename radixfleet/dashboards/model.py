"""The Model dashboard: latency percentiles against SLOs, load, KV cache, prefix reuse, scaling."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from radixfleet import metrics_names as m
from radixfleet.dashboards import sli
from radixfleet.dashboards.panels import Board, Filter, Q
from radixfleet.dashboards.uids import MODEL_UID

SEL = '{region=~"$region", namespace=~"$namespace", model_name=~"$model"}'
ISVC_SEL = '{namespace=~"$namespace", isvc=~"$model"}'
BY = "region, namespace, model_name"
LEGEND = "{{model_name}} {{region}}"


def build() -> Dashboard:
    """One or more models: how fast they answer, how loaded they are, how they scale."""
    board = Board(
        uid=MODEL_UID,
        title="radixfleet / Model",
        description="TTFT, ITL and end-to-end latency from SGLang's histograms; queue, KV cache, "
        "prefix reuse, replicas, scale events and canary weight.",
        filters=[
            Filter("region", m.REGION, m.SGLANG_RUNNING, "Region"),
            Filter("namespace", m.NAMESPACE, m.SGLANG_RUNNING, "Namespace"),
            Filter("model", m.MODEL_NAME, m.SGLANG_RUNNING, "Model"),
        ],
    )
    _latency(board.row("Latency"))
    _load(board.row("Load and cache"))
    _scaling(board.row("Replicas and rollout"))
    return board.build()


def _percentiles(name: str) -> list[Q]:
    return [
        Q(f"{sli.quantile(name, q)}{SEL}", f"p{round(q * 100)} {LEGEND}") for q in sli.QUANTILES
    ]


def _target(record: str) -> Q:
    # Only the targets of models that run here, not of the whole catalog.
    serving = f"group by (model_name) ({sli.REPLICAS}{SEL})"
    return Q(
        f'max by (model_name) ({record}{{model_name=~"$model"}}) and on (model_name) {serving}',
        "{{model_name}} SLO",
    )


def _latency(board: Board) -> None:
    board.timeseries(
        "Time to first token",
        [*_percentiles("ttft"), _target(sli.SLO_TTFT_TARGET)],
        unit="s",
        width=8,
        description="p50, p95 and p99 of sglang:time_to_first_token_seconds, and the p95 target.",
    )
    board.timeseries(
        "Inter-token latency",
        [*_percentiles("itl"), _target(sli.SLO_ITL_TARGET)],
        unit="s",
        width=8,
        description="p50, p95 and p99 of sglang:inter_token_latency_seconds, and the p95 target.",
    )
    board.timeseries(
        "End-to-end latency",
        _percentiles("e2e"),
        unit="s",
        width=8,
        description="p50, p95 and p99 of sglang:e2e_request_latency_seconds.",
    )


def _load(board: Board) -> None:
    board.timeseries(
        "Requests and errors",
        [
            Q(f"sum by ({BY}) ({sli.REQUEST_RATE}{SEL})", f"finished {LEGEND}"),
            Q(f"sum by ({BY}) ({sli.ABORTED_RATE}{SEL})", f"aborted {LEGEND}"),
        ],
        unit="reqps",
        width=8,
        description="Finished and aborted requests per second.",
    )
    board.timeseries(
        "Queue and running requests",
        [
            Q(f"{sli.QUEUE_REQUESTS}{SEL}", f"queued {LEGEND}"),
            Q(f"{sli.RUNNING_REQUESTS}{SEL}", f"running {LEGEND}"),
        ],
        unit="short",
        width=8,
        description="Requests waiting in SGLang's queues and in its running batches.",
    )
    board.timeseries(
        "Tokens per second",
        [
            Q(f"sum by ({BY}) ({sli.PROMPT_TOKEN_RATE}{SEL})", f"prompt {LEGEND}"),
            Q(f"sum by ({BY}) ({sli.CACHED_TOKEN_RATE}{SEL})", f"cached {LEGEND}"),
            Q(f"sum by ({BY}) ({sli.GENERATION_TOKEN_RATE}{SEL})", f"generated {LEGEND}"),
        ],
        unit="short",
        width=8,
        description="Prompt tokens (of which served from the prefix cache) and generated tokens.",
    )
    board.timeseries(
        "KV cache usage",
        [
            Q(f"{sli.KV_USAGE_MAX}{SEL}", f"fullest replica {LEGEND}"),
            Q(f"{m.SGLANG_TOKEN_USAGE}{SEL}", "{{instance}}"),
        ],
        unit="percentunit",
        max_value=1,
        description="sglang:token_usage: the share of the KV token budget running requests hold.",
    )
    board.timeseries(
        "Prefix cache hit ratio",
        [
            Q(f"{sli.PREFIX_HIT_RATIO}{SEL}", f"tokens {LEGEND}"),
            Q(f"{m.SGLANG_CACHE_HIT_RATE}{SEL}", "{{instance}} (SGLang)"),
        ],
        unit="percentunit",
        max_value=1,
        description="Cached prompt tokens over all prompt tokens, and SGLang's own hit rate gauge.",
    )


def _scaling(board: Board) -> None:
    board.timeseries(
        "Replicas",
        [
            Q(f"{sli.REPLICAS}{SEL}", f"running {LEGEND}"),
            Q(f"{m.DESIRED_REPLICAS.name}{ISVC_SEL}", "desired {{isvc}}"),
        ],
        unit="short",
        width=8,
        description="Replicas exporting metrics, and what the autoscaler decided.",
    )
    board.timeseries(
        "Scale events",
        [
            Q(
                f"sum by (namespace, isvc) (changes({m.DESIRED_REPLICAS.name}{ISVC_SEL}[5m]))",
                "{{isvc}}",
            )
        ],
        unit="short",
        width=8,
        description="Changes of the autoscaler's desired replicas over 5 minutes.",
    )
    board.timeseries(
        "Canary weight",
        [Q(f"{m.CANARY_WEIGHT.name}{ISVC_SEL}", "{{isvc}}")],
        unit="percent",
        width=8,
        max_value=100,
        description="canaryTrafficPercent set by the canary controller.",
    )
