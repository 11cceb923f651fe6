"""A self-contained HTML page for a run or a bench: tables of the numbers, plots inlined."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    ("requests", "requests", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("slo_attainment", "SLO attainment", "{:.1%}"),
    ("ttft_attainment", "TTFT attainment", "{:.1%}"),
    ("itl_attainment", "ITL attainment", "{:.1%}"),
    ("goodput_rps", "goodput req/s", "{:.2f}"),
    ("gpu_hours", "GPU-hours", "{:.2f}"),
    ("prefix_hit_rate", "prefix hit", "{:.1%}"),
    ("ttft_p95_s", "p95 TTFT s", "{:.3f}"),
    ("itl_p95_s", "p95 ITL s", "{:.4f}"),
    ("cold_start_waits", "cold-start waits", "{:.0f}"),
)
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; margin: 0.5em 0; }
.note { color: #666; font-size: 0.85em; }
"""


def metrics_table(results: dict[str, Any]) -> str:
    """One row per policy, the headline columns."""
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in COLUMNS)
    rows = []
    for name, values in results["metrics"].items():
        cells = "".join(f"<td>{_cell(values.get(key), fmt)}</td>" for key, _, fmt in COLUMNS)
        base = " (baseline)" if name in results.get("baselines", []) else ""
        rows.append(f"<tr><td>{html.escape(name + base)}</td>{cells}</tr>")
    return f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"


def ratios_table(results: dict[str, Any]) -> str:
    """Each policy's ratios against each baseline and oracle."""
    rows = []
    for name, entry in results["ratios"].items():
        for against, value in entry.items():
            if isinstance(value, dict):
                text = ", ".join(f"{k} {_cell(v, '{:.2f}x')}" for k, v in value.items())
            else:
                text = _cell(value, "{:.2f}x")
            rows.append(
                f"<tr><td>{html.escape(name)}</td><td>{html.escape(against)}</td>"
                f"<td>{text}</td></tr>"
            )
    return (
        "<table><tr><th>policy</th><th>against</th><th>ratios</th></tr>"
        + "".join(rows)
        + ("</table>")
    )


def tiers_table(results: dict[str, Any]) -> str:
    """With HiCache tiers: each policy's hit rate by the tier that held it, and the tiers'
    memory at its peak (empty for a scenario without tiers)."""
    rows = []
    for name, values in results["metrics"].items():
        tiers = values.get("prefix_hit_rate_by_tier")
        if tiers is None:
            continue
        cells = [_cell(tiers.get(t), "{:.1%}") for t in ("device", "host", "storage")]
        cells += [_cell(values.get(k), "{:.1f}") for k in TIER_MEMORY]
        rows.append(f"<tr><td>{html.escape(name)}</td>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")  # fmt: skip
    if not rows:
        return ""
    head = "".join(
        f"<th>{t}</th>" for t in ("hit on GPU", "hit from host", "hit from storage",
                                  "host GiB used", "host GiB allocated", "storage GiB used")
    )  # fmt: skip
    return f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"


TIER_MEMORY = ("host_gib_used_peak", "host_gib_allocated_peak", "storage_gib_used_peak")


def section(results: dict[str, Any], images: Sequence[Path]) -> str:
    """One scenario's part of a page."""
    title = html.escape(results["scenario"])
    description = html.escape(results.get("description", ""))
    pictures = "".join(_image(path) for path in images if path.exists())
    events = _events(results)
    return (
        f"<h2>{title}</h2><p>{description}</p>{metrics_table(results)}{tiers_table(results)}"
        f"{ratios_table(results)}{events}{pictures}"
    )


def _events(results: dict[str, Any]) -> str:
    parts = []
    for name, values in results["metrics"].items():
        for item in values.get("failover", []):
            parts.append(f"<li>{html.escape(name)}: outage of {item['region']}: {_kv(item)}</li>")
        for item in values.get("canary", []):
            parts.append(f"<li>{html.escape(name)}: canary of {item['model']}: {_kv(item)}</li>")
    return f"<ul>{''.join(parts)}</ul>" if parts else ""


def _kv(item: dict[str, Any]) -> str:
    return html.escape(
        ", ".join(f"{k} {v if not isinstance(v, float) else round(v, 3)}" for k, v in item.items())
    )


def page(title: str, sections: Sequence[str], note: str = "") -> str:
    """The whole HTML document."""
    body = "".join(sections)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p class='note'>{html.escape(note)}</p>{body}</body></html>\n"
    )


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'>"


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return html.escape(str(value))
