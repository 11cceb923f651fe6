"""Typed Prometheus rules: recording rules, alerts with the signals they watch, and groups.

An alert's `expr` compares signals against thresholds, so a healthy fleet returns nothing for it.
Each alert also names its `signals`: the sub-expressions that must return series whenever the
fleet exports its metrics. The live Prometheus test evaluates those, which tells a missing or
misspelt metric from a quiet alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class RecordingRule:
    """A recording rule: `record` is the name controllers and dashboards query."""

    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"record": self.record, "expr": self.expr}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True)
class AlertRule:
    """An alerting rule, with the expressions (`signals`) its condition is built from."""

    alert: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    signals: tuple[str, ...]
    dashboard: str = ""  # uid of the Grafana dashboard to open first

    def to_dict(self) -> dict[str, object]:
        annotations = {"summary": self.summary, "description": self.description}
        if self.dashboard:
            annotations["dashboard_uid"] = self.dashboard
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": annotations,
        }


@dataclass(frozen=True)
class RuleGroup:
    """A rule group; its rules are evaluated in order, so later rules may read earlier ones."""

    name: str
    rules: tuple[RecordingRule | AlertRule, ...]

    def to_dict(self, *, interval: str) -> dict[str, object]:
        return {
            "name": self.name,
            "interval": interval,
            "rules": [rule.to_dict() for rule in self.rules],
        }

    @property
    def expressions(self) -> list[str]:
        """Every expression of the group: recording rules, alert conditions and their signals."""
        out: list[str] = []
        for rule in self.rules:
            out.append(rule.expr)
            if isinstance(rule, AlertRule):
                out.extend(rule.signals)
        return out
