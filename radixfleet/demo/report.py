"""The demo's outputs: summary.json, report.html with readable plots, and the console table.

The page is one self-contained file (plots inlined as PNG): the summary table, the TTFT
distribution per region and model, output throughput over time per region with the moments a
model woke from zero, and the prefix cache hit rate per region and model beside the workload's
ideal (an unlimited prefix cache per region).
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from rich import box
from rich.console import Console
from rich.table import Table

from radixfleet.workload.records import RequestResult


@dataclass(frozen=True)
class Wake:
    """A model woken from zero: when (seconds since the replay started) and how long it took."""

    region: str
    model: str
    at: float
    seconds: float


BIN_S = 5.0  # throughput-over-time bins: wide enough to smooth a minute of arrivals


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    """Write `out/summary.json`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    return path


HEADERS = ("region/model", "reqs", "fail", "TTFT ms\np50/95/99", "ITL ms\np50/95/99", "out\ntok/s",
           "req/s", "prefix hit\n/ ideal")  # fmt: skip
CONSOLE_SKIPS = ("req/s",)  # 80 columns hold all but this; the page and summary.json have it


def print_table(console: Console, summary: dict[str, Any]) -> None:
    """The per region/model table, then the overall line (fits 80 columns)."""
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title="radixfleet demo",
    )
    keep = [header not in CONSOLE_SKIPS for header in HEADERS]
    for header in (h for h, k in zip(HEADERS, keep, strict=True) if k):
        table.add_column(header, justify="left" if header == HEADERS[0] else "right", no_wrap=True)
    rows = {**summary["per_region_model"], "all": summary["overall"]}
    for name, group in rows.items():
        row = (name, *_cells(group, ideal=_row_ideal(summary, name)))
        cells = [c for c, k in zip(row, keep, strict=True) if k]
        table.add_row(*cells, end_section=name == list(rows)[-2])
    console.print(table)
    for line in [*host_tier_lines(summary), *pd_lines(summary)]:
        console.print(line)


def host_tier_lines(summary: dict[str, Any]) -> list[str]:
    """One line per region/model with a HiCache host tier: its prompt tokens' hits by tier,
    beside what an unlimited cache would hit (the host tier can only add what the GPU missed)."""
    lines = []
    for name, tiers in summary.get("host_tier", {}).items():
        ideal = _row_ideal(summary, name)
        line = (
            f"{name}: host tier (HiCache) hit {tiers['host_hit_rate'] * 100:.1f}% of prompt "
            f"tokens, GPU {tiers['device_hit_rate'] * 100:.1f}%"
        )
        lines.append(line if ideal is None else f"{line}, of an ideal {ideal * 100:.1f}%")
    return lines


def pd_lines(summary: dict[str, Any]) -> list[str]:
    """One line per prefill/decode pair: its TTFT and ITL (p50) and the KV it moved."""
    lines = []
    for name, pair in summary.get("prefill_decode", {}).items():
        group = summary["per_region_model"].get(name, {})
        ttft, itl = group.get("ttft_s", {}).get("p50"), group.get("itl_s", {}).get("p50")
        lines.append(
            f"{name}: prefill/decode pair ({pair['prefill']}+{pair['decode']}, "
            f"{pair['transfer_backend']}): TTFT p50 {_ms_of(ttft)}, ITL p50 {_ms_of(itl)}, "
            f"KV transferred {pair['kv_transferred_mb']:.1f} MB in {pair['transfers']} transfers"
        )
    return lines


def _ms_of(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _cells(group: dict[str, Any], *, ideal: float | None) -> list[str]:
    return [
        str(group["requests"]),
        str(group["failed"]),
        _ms(group["ttft_s"]),
        _ms(group["itl_s"]),
        f"{group['throughput']['output_tokens_per_s']:.0f}",
        f"{group['throughput']['requests_per_s']:.2f}",
        _hit_cell(group["prefix_cache_hit_rate"], ideal),
    ]


def _hit_cell(hit: float | None, ideal: float | None) -> str:
    """Measured hit rate beside the ideal one (an unlimited cache): `27.8/30.1%`."""
    measured = "-" if hit is None else f"{hit * 100:.1f}"
    return f"{measured}%" if ideal is None else f"{measured}/{ideal * 100:.1f}%"


def _row_ideal(summary: dict[str, Any], name: str) -> float | None:
    """The ideal hit rate of a region/model row; none for the overall row (a mix of them)."""
    return None if name == "all" else _ideal(summary, name)


def _ms(quantiles: dict[str, float | None]) -> str:
    values = [quantiles[k] for k in ("p50", "p95", "p99")]
    return "/".join("-" if v is None else f"{v * 1000:.0f}" for v in values)


# -- the HTML page -----------------------------------------------------------------------------


def write_report(
    out: Path,
    *,
    summary: dict[str, Any],
    results: Sequence[RequestResult],
    wakes: Sequence[Wake],
) -> Path:
    """Write `out/report.html`."""
    figures = [
        ("Time to first token", _ttft_cdf(results)),
        ("Output throughput over time", _throughput(results, wakes)),
        ("Prefix cache hit rate", _hit_rates(summary)),
    ]
    body = [_intro(summary), _links(out), _table_html(summary)]
    body += [f"<h2>{html.escape(title)}</h2>{_img(fig)}" for title, fig in figures]
    body.append(_notes(summary))
    path = out / "report.html"
    path.write_text(_PAGE.format(css=_CSS, body="\n".join(body)), encoding="utf-8")
    return path


def _ttft_cdf(results: Sequence[RequestResult]) -> Figure:
    fig, ax = _figure()
    for name, values in sorted(_by_group(results).items()):
        ordered = sorted(values)
        share = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step([v * 1000 for v in ordered], share, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (ms, log scale)")
    ax.set_ylabel("share of requests")
    ax.legend(fontsize=8)
    return fig


def _by_group(results: Sequence[RequestResult]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.ok and r.ttft is not None:
            groups.setdefault(f"{r.region}/{r.model}", []).append(r.ttft)
    return groups


def _throughput(results: Sequence[RequestResult], wakes: Sequence[Wake]) -> Figure:
    fig, ax = _figure()
    end = max((r.ended for r in results), default=0.0)
    bins = int(end // BIN_S) + 1
    for region in sorted({r.region for r in results}):
        tokens = [0.0] * bins
        for r in results:
            if r.ok and r.region == region:
                tokens[int(r.ended // BIN_S)] += r.output_tokens / BIN_S
        ax.plot([i * BIN_S for i in range(bins)], tokens, label=region, drawstyle="steps-post")
    for wake in wakes:
        ax.axvspan(wake.at, wake.at + wake.seconds, color="grey", alpha=0.2)
        ax.annotate(f"{wake.model} in {wake.region}: woken from zero in {wake.seconds:.1f} s",
                    (wake.at + wake.seconds, 0), rotation=90, fontsize=7, xytext=(3, 5),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("seconds since the replay started")
    ax.set_ylabel("output tokens / s")
    ax.legend(fontsize=8)
    return fig


def _hit_rates(summary: dict[str, Any]) -> Figure:
    fig, ax = _figure()
    groups = summary["per_region_model"]
    names = list(groups)
    rates = [(groups[n]["prefix_cache_hit_rate"] or 0.0) * 100 for n in names]
    ax.bar(names, rates, color="#4c78a8", label="measured (cached / prompt tokens)")
    marks = [_ideal(summary, name) * 100 for name in names]
    ax.scatter(names, marks, color="#e45756", marker="_", s=600, linewidths=2,
               label="ideal: an unlimited cache per region", zorder=3)  # fmt: skip
    ax.set_ylabel("prefix cache hit rate (%)")
    ax.set_ylim(0, min(100.0, max([*rates, *marks, 10.0]) * 1.4))
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    return fig


def _ideal(summary: dict[str, Any], group: str) -> float:
    region, model = group.split("/", 1)
    described = summary["workload"]["models"].get(model, {})
    return float(described.get("ideal_prefix_hit_rate", {}).get(region, 0.0))


def _figure() -> tuple[Figure, Any]:
    fig = Figure(figsize=(8, 3.6), dpi=100)
    ax = fig.add_subplot()
    ax.grid(alpha=0.3)
    return fig, ax


def _img(fig: Figure) -> str:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _intro(summary: dict[str, Any]) -> str:
    demo = summary["demo"]
    requests = f"{summary['overall']['requests']} requests replayed over {demo['duration_s']:.0f} s"
    if demo.get("where") == "cluster":  # testbed/demo.py: `make demo-cluster`
        where = ("through the region entry of a one-node Kubernetes: the operator, the entry, "
                 "an smg router per revision and emulated SGLang predictors as pods.")  # fmt: skip
        woke = "its first request was answered {:.1f} s after it arrived (Knative woke it)"
    else:
        regions = ", ".join(_region_text(r) for r in demo["fleet"]["regions"])
        where = (f"against a local fleet of {regions}: emulated SGLang replicas behind the real "
                 "SGLang gateway (smg, cache_aware) per model, a request entry per region that "
                 "wakes models from zero.")  # fmt: skip
        woke = ("its first replica was ready and registered with the router {:.1f} s after the "
                "first request arrived")  # fmt: skip
    return (
        "<h1>radixfleet demo</h1>"
        f"<p>{requests} at {demo['rate']:g} req/s {html.escape(where)}</p>"
        f"<p class='scale'>{html.escape(demo['time_scale_note'])}</p>"
        + "".join(
            f"<p>{html.escape(w['region'])}/{html.escape(w['model'])} woke from zero replicas: "
            f"{woke.format(w['seconds'])}; the requests meanwhile were held, not lost.</p>"
            for w in summary["wake_from_zero"]
        )
    )


def _links(out: Path) -> str:
    links = [("dashboards.html", "Grafana dashboards"), ("summary.json", "summary.json"),
             ("rendered", "rendered manifests")]  # fmt: skip
    present = [f'<a href="{href}">{text}</a>' for href, text in links if (out / href).exists()]
    return f"<p>{' | '.join(present)}</p>" if present else ""


def _region_text(region: dict[str, Any]) -> str:
    models = ", ".join(f"{m['name']} x{m['replicas']}" for m in region["models"])
    return f"{region['name']} ({models})"


def _table_html(summary: dict[str, Any]) -> str:
    rows = {**summary["per_region_model"], "all": summary["overall"]}
    cells = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(c)}</td>"
            for c in (name, *_cells(g, ideal=_row_ideal(summary, name)))
        )
        + "</tr>"
        for name, g in rows.items()
    )
    header = "".join(f"<th>{html.escape(h).replace(chr(10), '<br>')}</th>" for h in HEADERS)
    lines = [*host_tier_lines(summary), *pd_lines(summary)]
    tiers = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    return f"<table><tr>{header}</tr>{cells}</table>{tiers}"


def _notes(summary: dict[str, Any]) -> str:
    items = [f"<li>{html.escape(line)}</li>" for line in summary["notes"]]
    return "<h2>Notes</h2><ul>" + "".join(items) + "</ul>"


_CSS = """
body { font-family: sans-serif; margin: 24px; max-width: 960px; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
tr:last-child { font-weight: bold; }
.scale { color: #555; font-size: 13px; }
img { display: block; margin: 8px 0 16px 0; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>radixfleet demo</title>
<style>{css}</style></head>
<body>
{body}
</body></html>
"""
