"""The Regions dashboard: health signals, Route 53 weights and failover events per region."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from radixfleet import metrics_names as m
from radixfleet.dashboards import sli
from radixfleet.dashboards.panels import Board, Filter, Q
from radixfleet.dashboards.uids import REGIONS_UID

SEL = '{region=~"$region"}'


def build() -> Dashboard:
    """What the failover controller sees and does, region by region."""
    board = Board(
        uid=REGIONS_UID,
        title="radixfleet / Regions",
        description="The serving signals the failover controller judges regions by, its verdict, "
        "the Route 53 weights it sets and its failover events.",
        filters=[Filter("region", m.REGION, m.REGION_HEALTHY.name, "Region")],
    )
    _health(board.row("Health"))
    _traffic(board.row("Traffic"))
    return board.build()


def _health(board: Board) -> None:
    board.timeseries(
        "Healthy",
        [Q(f"{m.REGION_HEALTHY.name}{SEL}", "{{region}}")],
        unit="short",
        max_value=1,
        description="1 while the failover controller judges the region healthy, 0 otherwise.",
    )
    board.timeseries(
        "TTFT p95",
        [Q(f"{sli.REGION_TTFT_P95}{SEL}", "{{region}}")],
        unit="s",
        description="p95 time to first token over all the region's models.",
    )
    board.timeseries(
        "Error ratio",
        [Q(f"{sli.REGION_ERROR_RATIO}{SEL}", "{{region}}")],
        unit="percentunit",
        description="Aborted requests over all requests.",
    )
    board.timeseries(
        "Replica availability",
        [Q(f"{sli.REGION_AVAILABILITY}{SEL}", "{{region}}")],
        unit="percentunit",
        max_value=1,
        description="Share of SGLang scrape targets that answer.",
    )


def _traffic(board: Board) -> None:
    board.timeseries(
        "Route 53 weights",
        [Q(f"{m.REGION_WEIGHT.name}{SEL}", "{{region}} {{model_name}}")],
        unit="short",
        width=8,
        description="Weights of the models' weighted records, set by the failover controller.",
    )
    board.timeseries(
        "Failover events",
        [
            Q(
                f"sum by (region, direction) (increase({m.FAILOVER_EVENTS.name}{SEL}[5m]))",
                "{{region}} {{direction}}",
            )
        ],
        unit="short",
        width=8,
        description="Traffic shifts out of a region and back into it, per 5 minutes.",
    )
    board.timeseries(
        "Requests per second",
        [Q(f"sum by (region) ({sli.REQUEST_RATE}{SEL})", "{{region}}")],
        unit="reqps",
        width=8,
        description="Finished requests per second, per region.",
    )
