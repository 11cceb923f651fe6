"""The Fleet dashboard: regions, models, replicas, GPUs and their use, throughput, SLOs, cost."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from radixfleet import metrics_names as m
from radixfleet.dashboards import sli
from radixfleet.dashboards.panels import Board, Filter, Q
from radixfleet.dashboards.uids import FLEET_UID

SEL = '{region=~"$region"}'


def build() -> Dashboard:
    """The whole fleet at a glance, filterable by region."""
    board = Board(
        uid=FLEET_UID,
        title="radixfleet / Fleet",
        description="Every region's models, replicas and GPUs; throughput, SLOs and GPU-hours.",
        filters=[Filter("region", m.REGION, "up", "Region")],
    )
    _overview(board.row("Overview"))
    _serving(board.row("Throughput and SLOs"))
    _gpus(board.row("GPUs"))
    return board.build()


def _overview(board: Board) -> None:
    stats = [
        (
            "Regions",
            'count(count by (region) (up{region=~"$region", region!=""}))',
            "Regions with scrape targets.",
        ),
        (
            "Healthy regions",
            f"sum({m.REGION_HEALTHY.name}{SEL})",
            "Regions the failover controller judges healthy.",
        ),
        (
            "Models serving",
            f"count(count by (model_name) ({sli.REPLICAS}{SEL}))",
            "Models with at least one replica.",
        ),
        ("Replicas", f"sum({sli.REPLICAS}{SEL})", "SGLang replicas exporting metrics."),
        ("GPUs in use", f"sum({sli.GPUS_IN_USE}{SEL})", "GPUs requested by running pods."),
    ]
    for title, expr, description in stats:
        board.stat(title, [Q(expr)], unit="short", description=description)
    board.stat(
        "GPU utilization",
        [Q(f"avg({sli.GPU_UTILIZATION}{SEL})")],
        unit="percentunit",
        description="Mean GPU utilization over all GPUs (DCGM_FI_DEV_GPU_UTIL).",
    )


def _serving(board: Board) -> None:
    board.timeseries(
        "Tokens per second",
        [
            Q(f"sum by (region) ({sli.TOKENS_PER_SECOND}{SEL})", "{{region}} all"),
            Q(f"sum by (region) ({sli.GENERATION_TOKEN_RATE}{SEL})", "{{region}} generated"),
        ],
        unit="short",
        description="Prompt plus generated tokens per second, and generated alone, per region.",
    )
    board.timeseries(
        "TTFT SLO attainment (1h)",
        [Q(f"1 - {sli.slo_ttft_bad_ratio('1h')}{SEL}", "{{model_name}} {{region}}")],
        unit="percentunit",
        max_value=1,
        description=f"Share of requests within their model's TTFT target over the last hour; "
        f"the objective is {sli.SLO_OBJECTIVE:.0%}.",
    )
    board.timeseries(
        "Replicas by model",
        [Q(f"sum by (region, model_name) ({sli.REPLICAS}{SEL})", "{{model_name}} {{region}}")],
        unit="short",
        stacked=True,
        description="SGLang replicas per model and region.",
    )
    board.timeseries(
        "Requests per second",
        [Q(f"sum by (region) ({sli.REQUEST_RATE}{SEL})", "{{region}}")],
        unit="reqps",
        description="Finished requests per second per region.",
    )


def _gpus(board: Board) -> None:
    board.timeseries(
        "GPUs in use and pending",
        [
            Q(f"sum by (region) ({sli.GPUS_IN_USE}{SEL})", "{{region}} running"),
            Q(f"sum by (region) ({sli.GPUS_PENDING}{SEL})", "{{region}} pending"),
        ],
        unit="short",
        description="GPUs requested by running pods, and by pods still waiting for a node.",
    )
    board.timeseries(
        "GPU utilization (DCGM)",
        [Q(f"{sli.GPU_UTILIZATION}{SEL}", "{{region}}")],
        unit="percentunit",
        max_value=1,
        description="Mean DCGM_FI_DEV_GPU_UTIL per region.",
    )
    board.timeseries(
        "GPU memory in use (DCGM)",
        # DCGM reports MiB.
        [Q(f"sum by (region) ({m.DCGM_FB_USED}{SEL}) * 1048576", "{{region}}")],
        unit="bytes",
        description="Frame buffer in use, summed per region (DCGM_FI_DEV_FB_USED).",
    )
    board.stat(
        "GPU-hours in range",
        # A subquery at the panel's step integrates GPUs over time, even as pods come and go.
        [
            Q(
                f"sum_over_time(sum by (region) ({sli.GPUS_IN_USE}{SEL})[$__range:$__interval])"
                " * $__interval_ms / 3600000",
                "{{region}}",
            )
        ],
        unit="short",
        width=12,
        description="GPU-hours held by running pods over the dashboard's time range.",
    )
