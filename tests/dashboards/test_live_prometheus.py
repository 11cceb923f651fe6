"""Every PromQL expression of the dashboards and the rules, against a real Prometheus.

Each must parse and return series from the local fleet's metrics; an alert's condition only has
to parse (a healthy fleet does not fire it), while the signals it is built from must return series.
"""

from __future__ import annotations

import pytest

from radixfleet.config.catalog import Catalog
from radixfleet.dashboards import promql, rules
from radixfleet.dashboards.render import all_dashboards
from tests.dashboards.conftest import LivePrometheus, wait_for_series

pytestmark = pytest.mark.prometheus

# Grafana sends $__range and $__interval (from the range and the panel's width, never under the
# scrape interval). The test's Prometheus holds seconds of data scraped every second, so: an
# hour's range at one-second steps.
RANGE_S, INTERVAL_S = 3600, 1


def dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for name, board in all_dashboards().items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = promql.expand(target["expr"], range_s=RANGE_S, interval_s=INTERVAL_S)
                out.append((f"{name}: {panel['title']} [{target['refId']}]", expr))
    return out


def test_rules_load_and_evaluate_healthy(live_prometheus: LivePrometheus, catalog: Catalog) -> None:
    wait_for_series(live_prometheus.url, [rules_sentinel()], timeout_s=20)
    groups = promql._get(live_prometheus.url, "/api/v1/rules", {})["groups"]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    expected = {name for name, _ in rules.all_expressions(catalog) if "signal" not in name}
    assert expected <= set(loaded)
    unhealthy = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
    assert not unhealthy


def rules_sentinel() -> str:
    from radixfleet.dashboards import sli

    return sli.slo_ttft_bad_ratio("5m")


def test_every_expression_returns_series(live_prometheus: LivePrometheus, catalog: Catalog) -> None:
    alerts = {
        a
        for a in (
            r.alert for g in rules.rule_groups(catalog) for r in g.rules if hasattr(r, "alert")
        )
    }
    must_return = [(n, e) for n, e in rules.all_expressions(catalog) if n not in alerts]
    must_return += dashboard_queries()
    counts = wait_for_series(live_prometheus.url, sorted({e for _, e in must_return}), timeout_s=30)
    empty = [f"{name}: {expr}" for name, expr in must_return if counts[expr] == 0]
    assert not empty, "returned no series:\n" + "\n".join(empty)
    # Alert conditions must at least parse (an exception here names the bad PromQL).
    for name, expr in rules.all_expressions(catalog):
        if name in alerts:
            promql.query(live_prometheus.url, expr)
    print(f"{len(counts)} distinct expressions returned series")
