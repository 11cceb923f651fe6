"""A small layer over grafana-foundation-sdk that keeps the five dashboards short and alike.

`Board` wraps the SDK's dashboard builder: it adds the datasource and filter variables every
dashboard shares, numbers panels in order (the SDK leaves ids to the caller) and gives every
query the dashboard's datasource, so each dashboard module only says what to plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["radixfleet"]
# Every "All" selection becomes this regex, so `label=~"$var"` also matches series without it.
ALL_VALUE = ".*"


@dataclass(frozen=True)
class Q:
    """One PromQL query of a panel and the legend of its series."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Filter:
    """A dashboard variable that filters by a label, with values taken from one metric."""

    name: str
    label: str
    metric: str
    title: str


class Board:
    """A dashboard under construction: variables, then rows and panels in reading order."""

    def __init__(self, *, uid: str, title: str, description: str, filters: Sequence[Filter]):
        self._next_id = 1
        self._builder = (
            dash_b.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(TAGS)
            .time("now-1h", "now")
            .refresh("30s")
            .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
            .with_variable(
                dash_b.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
            )
        )
        for f in filters:
            self._builder.with_variable(_filter_variable(f))

    def row(self, title: str) -> Board:
        self._builder.with_row(dash_b.Row(title).id(self._take_id()))
        return self

    def timeseries(
        self,
        title: str,
        queries: Sequence[Q],
        *,
        unit: str,
        description: str,
        width: int = 12,
        height: int = 8,
        stacked: bool = False,
        max_value: float | None = None,
    ) -> Board:
        panel = (
            ts_b.Panel()
            .title(title)
            .description(description)
            .unit(unit)
            .span(width)
            .height(height)
            .min(0)
            .fill_opacity(10)
            .legend(_legend())
        )
        if stacked:
            panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
        if max_value is not None:
            panel.max(max_value)
        return self._add(panel, queries)

    def stat(
        self,
        title: str,
        queries: Sequence[Q],
        *,
        unit: str,
        description: str,
        width: int = 4,
        height: int = 4,
    ) -> Board:
        panel = (
            stat_b.Panel()
            .title(title)
            .description(description)
            .unit(unit)
            .span(width)
            .height(height)
            .graph_mode(common_m.BigValueGraphMode.AREA)
            .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
        )
        return self._add(panel, queries)

    def build(self) -> dash_m.Dashboard:
        return self._builder.build()

    def _add(self, panel: ts_b.Panel | stat_b.Panel, queries: Sequence[Q]) -> Board:
        panel.id(self._take_id()).datasource(DATASOURCE)
        for ref, q in zip("ABCDEFGHIJ", queries, strict=False):
            target = prom_b.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
            panel.with_target(target.legend_format(q.legend or "__auto"))
        self._builder.with_panel(panel)
        return self

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1


def _filter_variable(f: Filter) -> dash_b.QueryVariable:
    return (
        dash_b.QueryVariable(f.name)
        .label(f.title)
        .datasource(DATASOURCE)
        .query(f"label_values({f.metric}, {f.label})")
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(ALL_VALUE)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
    )


def _legend() -> common_b.VizLegendOptions:
    return (
        common_b.VizLegendOptions()
        .display_mode(common_m.LegendDisplayMode.LIST)
        .placement(common_m.LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def matches(label: str, variable: str) -> str:
    """A label matcher for a multi-value variable: region=~"$region"."""
    return f'{label}=~"${variable}"'
