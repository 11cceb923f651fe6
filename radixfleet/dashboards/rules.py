"""The Prometheus rules of the fleet, in the two forms they are deployed in, from one source.

`rule_groups` is the source. `prometheus_rule` wraps it in a `monitoring.coreos.com/v1`
PrometheusRule for the Prometheus Operator (what `infra/` deploys); `rule_file` is the plain rule
file that `promtool` checks and tests and that a Prometheus without the operator loads.
"""

from __future__ import annotations

from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Catalog
from radixfleet.dashboards import alerts, sli
from radixfleet.dashboards.rulespec import AlertRule, RuleGroup

# How often the groups are evaluated in the fleet: a fraction of the 5-minute rate windows, and
# no faster than the 30 s scrape interval of the kube-prometheus-stack defaults.
EVALUATION_INTERVAL = "30s"
RULE_NAME = "radixfleet-rules"
# The kube-prometheus-stack's Prometheus selects PrometheusRules by this label (its ruleSelector).
RULE_SELECTOR_LABELS = {"prometheus": "radixfleet"}


def rule_groups(catalog: Catalog) -> list[RuleGroup]:
    """Every group, recording rules before the alerts that read them."""
    return [
        RuleGroup(
            "radixfleet-sli",
            (
                *sli.revision_rate_rules(),
                *sli.latency_quantile_rules(),
                *sli.model_rules(),
                *sli.region_rules(),
            ),
        ),
        RuleGroup("radixfleet-gpus", tuple(sli.gpu_rules())),
        RuleGroup("radixfleet-tenants", tuple(sli.tenant_rules())),
        RuleGroup("radixfleet-slo", (*sli.slo_target_rules(catalog), *sli.slo_burn_rules())),
        RuleGroup("radixfleet-alerts", tuple(alerts.all_alerts())),
    ]


def rule_file(catalog: Catalog, *, interval: str = EVALUATION_INTERVAL) -> dict[str, Any]:
    """The plain Prometheus rule file (`rule_files:` in prometheus.yml; `promtool check rules`)."""
    return {"groups": [g.to_dict(interval=interval) for g in rule_groups(catalog)]}


def prometheus_rule(catalog: Catalog, *, namespace: str = "monitoring") -> dict[str, Any]:
    """The same groups as a Prometheus Operator PrometheusRule object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": RULE_NAME,
            "namespace": namespace,
            "labels": {**RULE_SELECTOR_LABELS, labels.MANAGED_BY: labels.MANAGER},
        },
        "spec": rule_file(catalog),
    }


def all_expressions(catalog: Catalog) -> list[tuple[str, str]]:
    """(rule name, expression) for every expression the rules evaluate, signals included."""
    out: list[tuple[str, str]] = []
    for group in rule_groups(catalog):
        for rule in group.rules:
            if isinstance(rule, AlertRule):
                out.append((rule.alert, rule.expr))
                out.extend((f"{rule.alert} signal", s) for s in rule.signals)
            else:
                out.append((rule.record, rule.expr))
    return out
