"""Run dashboard queries against Prometheus's HTTP API, the way Grafana would run them.

Grafana rewrites a panel's expression before sending it: `$region` becomes the selected values,
`$__range` the time range. `expand` does the same with "All" selected everywhere, and `query` /
`query_range` send the result with the standard library's HTTP client.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from radixfleet.dashboards.panels import ALL_VALUE

# `$name` and `${name}`, but not label_replace's `$1`.
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")


class PrometheusError(Exception):
    """Prometheus refused a query (bad PromQL: 400/422) or could not be reached (status 0)."""

    def __init__(self, message: str, *, status: int, error_type: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclass(frozen=True)
class Series:
    """One series of a result: its labels and its (unix time, value) points."""

    labels: Mapping[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


def expand(
    expr: str,
    *,
    range_s: int,
    interval_s: int,
    variables: Mapping[str, str] | None = None,
) -> str:
    """Substitute Grafana's built-in and dashboard variables; unknown ones select All."""
    builtins = {
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
        "__range": f"{range_s}s",
        "__interval_ms": str(interval_s * 1000),
        "__interval": f"{interval_s}s",
        # Grafana's $__rate_interval is at least four scrape intervals.
        "__rate_interval": f"{max(4 * interval_s, 60)}s",
    }
    given = {**builtins, **(variables or {})}

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return given.get(name, ALL_VALUE)

    return _VARIABLE.sub(substitute, expr)


def query(base_url: str, expr: str, *, at: float | None = None) -> list[Series]:
    """An instant query; each series carries one point."""
    params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
    data = _get(base_url, "/api/v1/query", params)
    if data["resultType"] == "scalar":
        ts, value = data["result"]
        return [Series({}, [(float(ts), float(value))])]
    return [
        Series(r["metric"], [(float(r["value"][0]), float(r["value"][1]))]) for r in data["result"]
    ]


def query_range(base_url: str, expr: str, *, start: float, end: float, step: float) -> list[Series]:
    """A range query over [start, end] at `step` seconds."""
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    data = _get(base_url, "/api/v1/query_range", params)
    return [
        Series(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]
    ]


def label_values(base_url: str, label: str, *, match: str) -> list[str]:
    """The values of `label` on series matching `match`: Grafana's label_values(match, label)."""
    path = f"/api/v1/label/{urllib.parse.quote(label)}/values"
    values: list[str] = _get(base_url, path, {"match[]": match})
    return values


def _get(base_url: str, path: str, params: Mapping[str, str]) -> Any:
    url = f"{base_url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        raise _http_error(exc) from None
    except urllib.error.URLError as exc:
        raise PrometheusError(f"{url}: {exc.reason}", status=0) from None
    return body["data"]


def _http_error(exc: urllib.error.HTTPError) -> PrometheusError:
    # Prometheus explains a bad query in the JSON body of its 400/422 answer; while starting it
    # answers 503 in plain text.
    text = exc.read().decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return PrometheusError(text.strip() or str(exc), status=exc.code)
    return PrometheusError(
        body.get("error", text), status=exc.code, error_type=body.get("errorType", "")
    )
