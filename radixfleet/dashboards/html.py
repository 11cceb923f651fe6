"""A static HTML rendering of the Grafana dashboards, drawn from a live Prometheus.

Reports (`radixfleet demo`) cannot ship a Grafana server, so this module reads the same
dashboard JSON Grafana imports, runs each panel's queries over a time range (with "All" selected
for every variable) and lays the panels out on Grafana's 24-column grid: timeseries as
matplotlib plots (inline PNG), stats as numbers. The page is one self-contained file.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator

from radixfleet.dashboards import promql
from radixfleet.dashboards.promql import PrometheusError, Series

COLUMN_PX = 50  # Grafana's grid has 24 columns; 50 px each makes a 1200 px page.
ROW_PX = 30  # and rows of 30 px, as in Grafana.
LEGEND_ROWS = 4
LEGEND_ROW_PX = 11
MAX_POINTS = 240  # points per series, like Grafana's maxDataPoints for a panel this wide
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")


@dataclass(frozen=True)
class Window:
    """The time range a page shows, and the step its queries use."""

    start: float
    end: float

    @property
    def range_s(self) -> int:
        return max(1, round(self.end - self.start))

    @property
    def step_s(self) -> int:
        return max(1, math.ceil(self.range_s / MAX_POINTS))


def render_dashboard_html(
    dashboards: Sequence[Mapping[str, Any]],
    prometheus_url: str,
    start: float,
    end: float,
    *,
    title: str = "radixfleet dashboards",
) -> str:
    """One HTML page with every panel of `dashboards` over [start, end] (unix seconds)."""
    window = Window(start, end)
    sections = [_dashboard(d, prometheus_url, window) for d in dashboards]
    when = f"{_utc(start)} to {_utc(end)} UTC, from {prometheus_url}"
    return _PAGE.format(
        title=html.escape(title), when=html.escape(when), body="\n".join(sections), css=_CSS
    )


def _dashboard(board: Mapping[str, Any], url: str, window: Window) -> str:
    panels = [_panel(p, url, window) for p in board.get("panels", [])]
    return (
        f'<section class="dashboard" data-uid="{html.escape(board["uid"])}">'
        f"<h2>{html.escape(board['title'])}</h2>"
        f"<p>{html.escape(board.get('description', ''))}</p>"
        f'<div class="grid">{"".join(panels)}</div></section>'
    )


def _panel(panel: Mapping[str, Any], url: str, window: Window) -> str:
    pos = panel["gridPos"]
    place = f"grid-column:{pos['x'] + 1}/span {pos['w']};grid-row:{pos['y'] + 1}/span {pos['h']}"
    title = html.escape(panel.get("title", ""))
    if panel["type"] == "row":
        return f'<h3 class="row" style="{place}">{title}</h3>'
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    try:
        results = [_run(t, panel["type"], url, window) for t in panel.get("targets", [])]
    except PrometheusError as exc:
        body, css, count = f'<pre class="error">{html.escape(str(exc))}</pre>', " panel-error", 0
    else:
        count = sum(len(series) for series, _ in results)
        draw = _stat_body if panel["type"] == "stat" else _plot_body
        body, css = draw(results, unit, pos), ""
    return (
        f'<div class="panel{css}" style="{place}" data-series="{count}">'
        f'<div class="title" title="{html.escape(panel.get("description", ""))}">{title}</div>'
        f"{body}</div>"
    )


def _run(
    target: Mapping[str, Any], kind: str, url: str, window: Window
) -> tuple[list[Series], str]:
    expr = promql.expand(target["expr"], range_s=window.range_s, interval_s=window.step_s)
    legend = target.get("legendFormat", "")
    if kind == "stat":
        return promql.query(url, expr, at=window.end), legend
    return promql.query_range(
        url, expr, start=window.start, end=window.end, step=window.step_s
    ), legend


def legend_text(legend: str, labels: Mapping[str, str]) -> str:
    """A series' name as Grafana writes it from a legendFormat such as "{{region}} pending"."""
    if legend in ("", "__auto"):
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return labels.get("__name__", "") + (f"{{{inner}}}" if inner else "") or "value"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), legend).strip()


def _stat_body(results: list[tuple[list[Series], str]], unit: str, pos: Mapping[str, int]) -> str:
    values = [
        f'<div class="stat"><span class="value">{html.escape(format_value(s.points[-1][1], unit))}'
        f'</span><span class="label">{html.escape(_stat_label(legend, s))}</span></div>'
        for series, legend in results
        for s in series
        if s.points
    ]
    return "".join(values) or '<div class="nodata">No data</div>'


def _stat_label(legend: str, series: Series) -> str:
    # A single unlabelled number needs no caption, as in Grafana.
    return "" if not series.labels else legend_text(legend, series.labels)


def _plot_body(results: list[tuple[list[Series], str]], unit: str, pos: Mapping[str, int]) -> str:
    if not any(series for series, _ in results):
        return '<div class="nodata">No data</div>'
    width, height = pos["w"] * COLUMN_PX - 12, pos["h"] * ROW_PX - 34
    fig = Figure(figsize=(width / 100, height / 100), dpi=100)
    ax = fig.add_subplot()
    for series, legend in results:
        for s in series:
            times = [t for t, _ in s.points]
            ax.plot(
                times, [v for _, v in s.points], linewidth=1.2, label=legend_text(legend, s.labels)
            )
    _style(ax, unit)
    rows = _legend(fig, ax, columns=max(1, pos["w"] // 4))
    # A fixed layout (constrained layout triples the drawing time): the legend under the axes,
    # as Grafana draws it, and room for the tick labels.
    fig.subplots_adjust(
        left=58 / width,
        right=1 - 10 / width,
        top=1 - 8 / height,
        bottom=(30 + LEGEND_ROW_PX * rows) / height,
    )
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" width="{width}" height="{height}" src="data:image/png;base64,{data}">'


def _legend(fig: Figure, ax: Any, *, columns: int) -> int:
    """Draw the legend under the axes; return how many rows it takes."""
    # Grafana scrolls a long legend; a picture cannot, so it lists what fits and counts the rest.
    handles, labels = ax.get_legend_handles_labels()
    room = columns * LEGEND_ROWS
    if len(labels) > room:
        handles, labels = handles[: room - 1], labels[: room - 1]
        labels.append(f"+{len(ax.get_lines()) - len(handles)} more series")
        handles.append(Line2D([], [], linestyle="none"))
    fig.legend(
        handles,
        labels,
        loc="lower center",
        fontsize=6,
        frameon=False,
        ncols=columns,
        borderaxespad=0.2,
        handlelength=1.5,
        columnspacing=1.0,
    )
    return math.ceil(len(labels) / columns)


def _style(ax: Any, unit: str) -> None:
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(v, unit)))
    # x is unix seconds, labelled as UTC clock time.
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda t, _: _clock(t)))
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    lowest = min((min(line.get_ydata(), default=0.0) for line in ax.get_lines()), default=0.0)
    if lowest >= 0:
        ax.set_ylim(bottom=0.0, top=max(ax.get_ylim()[1], 1e-9))


def format_value(value: float, unit: str) -> str:
    """A number in a Grafana unit, briefly: 0.42 percentunit -> "42%", 0.012 s -> "12 ms"."""
    if math.isnan(value):
        return "NaN"
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "percent":
        return f"{value:.3g}%"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    if unit == "bytes":
        return _scaled(value, 1024, ("B", "KiB", "MiB", "GiB", "TiB"))
    suffix = " req/s" if unit == "reqps" else ""
    return _scaled(value, 1000, ("", "k", "M", "G", "T")) + suffix


def _scaled(value: float, base: int, names: Sequence[str]) -> str:
    index = 0
    while abs(value) >= base and index < len(names) - 1:
        value /= base
        index += 1
    space = " " if base == 1024 else ""  # "69.3 GiB" but "1.53k", as Grafana writes them
    return f"{value:.3g}{space}{names[index]}"


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S")


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


_CSS = f"""
body {{ font-family: sans-serif; background: #111217; color: #d8d9da; margin: 16px; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 18px; margin-top: 28px; }}
.grid {{ display: grid; grid-template-columns: repeat(24, {COLUMN_PX}px);
         grid-auto-rows: {ROW_PX}px; gap: 0; }}
.row {{ font-size: 14px; margin: 6px 0 0 0; border-bottom: 1px solid #333; }}
.panel {{ background: #181b1f; border: 1px solid #2c3235; margin: 3px; overflow: hidden;
          box-sizing: border-box; padding: 4px; }}
.panel .title {{ font-size: 12px; font-weight: bold; margin-bottom: 2px; }}
.panel-error {{ border-color: #e02f44; }}
.error {{ color: #e02f44; font-size: 11px; white-space: pre-wrap; }}
.stat {{ display: inline-block; margin: 2px 10px 0 0; }}
.stat .value {{ font-size: 22px; color: #73bf69; display: block; }}
.stat .label {{ font-size: 10px; color: #8e8e8e; }}
.nodata {{ color: #8e8e8e; font-size: 12px; }}
img {{ background: white; display: block; }}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{css}</style></head>
<body><h1>{title}</h1><p class="when">{when}</p>
{body}
</body></html>
"""


def write_dashboard_report(out_dir: Path, prometheus_url: str, start: float, end: float) -> Path:
    """Write `out_dir/dashboards.html`: every generated dashboard over [start, end]."""
    # Imported here: render pulls in every dashboard module, which a caller of
    # render_dashboard_html with its own JSON does not need.
    from radixfleet.dashboards.render import all_dashboards

    page = render_dashboard_html(list(all_dashboards().values()), prometheus_url, start, end)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "dashboards.html"
    path.write_text(page, encoding="utf-8")
    return path
