"""The canary's exported series: the dashboards' names and label values, from whole rollouts."""

from __future__ import annotations

import pytest

from radixfleet import metrics_names
from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.controllers.canary.fakes import FakeBaselines
from radixfleet.controllers.canary.metrics import CHECK_LABELS, DECISION_LABELS, CanaryMetrics
from radixfleet.controllers.canary.spec import Metric
from radixfleet.controllers.canary.state import Verb
from tests.canary.test_controller import AT_THE_CANARYS_LOAD, BUSY, GOOD, NAME, NS, Fleet, answers

LABELS = {"namespace": NS, "isvc": NAME}


def test_every_check_and_decision_has_the_dashboards_label_value() -> None:
    assert set(CHECK_LABELS) == set(Metric)
    assert sorted(CHECK_LABELS.values()) == sorted(metrics_names.CANARY_CHECKS)
    assert set(DECISION_LABELS) == set(Verb)
    assert sorted(DECISION_LABELS.values()) == sorted(metrics_names.CANARY_DECISION_VALUES)


def test_series_names_and_labels_are_the_defined_ones() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.controller.metrics = metrics = CanaryMetrics()
    fleet.tick(8)
    families = {f.name: f for f in metrics.registry.collect()}
    for metric in (
        metrics_names.CANARY_WEIGHT,
        metrics_names.CANARY_CHECK_VALUE,
        metrics_names.CANARY_CHECK_FAILED,
        metrics_names.CANARY_DECISIONS,
    ):
        name = metric.name.removesuffix("_total")  # prometheus_client's family name
        samples = [s for s in families[name].samples if not s.name.endswith("_created")]
        assert samples, metric.name
        assert {s.name for s in samples} == {metric.name}
        assert all(set(s.labels) == set(metric.labels) for s in samples)


def _value(metrics: CanaryMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {**LABELS, **labels})


def test_a_promoted_rollout_counts_its_steps_and_shows_its_checks() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD)))
    fleet.controller.metrics = metrics = CanaryMetrics()
    fleet.tick(30)
    decisions = "radixfleet_canary_decisions_total"
    assert _value(metrics, decisions, decision="advance") == 3
    assert _value(metrics, decisions, decision="promote") == 1
    assert _value(metrics, decisions, decision="rollback") is None
    assert _value(metrics, "radixfleet_canary_weight") == 100
    value = "radixfleet_canary_check_value"
    assert _value(metrics, value, check="ttft_p95", revision="canary") == pytest.approx(0.2)
    assert _value(metrics, value, check="error_ratio", revision="stable") == 0
    assert _value(metrics, "radixfleet_canary_check_failed", check="itl_p95") == 0
    # A finished rollout's idle ticks are not decisions.
    held = _value(metrics, decisions, decision="hold")
    fleet.tick(5)
    assert _value(metrics, decisions, decision="hold") == held


def test_a_rolled_back_rollout_flags_the_failed_check() -> None:
    fleet = Fleet(FakePrometheus(answers(GOOD | {Metric.ERROR_RATE: 0.05})))
    fleet.controller.metrics = metrics = CanaryMetrics()
    fleet.tick(20)
    assert _value(metrics, "radixfleet_canary_decisions_total", decision="rollback") == 1
    assert _value(metrics, "radixfleet_canary_weight") == 0
    assert _value(metrics, "radixfleet_canary_check_failed", check="error_ratio") == 1
    assert _value(metrics, "radixfleet_canary_check_failed", check="ttft_p95") == 0


def test_the_compared_value_is_labelled_with_what_the_canary_was_compared_with() -> None:
    metrics, value = CanaryMetrics(), "radixfleet_canary_check_value"
    against_stable = Fleet(FakePrometheus(answers(GOOD)))
    against_stable.controller.metrics = metrics
    against_stable.tick(8)
    assert _value(metrics, value, check="ttft_p95", revision="stable") == pytest.approx(0.2)
    beside_a_baseline = Fleet(
        FakePrometheus(answers(BUSY, BUSY, baseline=AT_THE_CANARYS_LOAD)),
        spec={"baseline": True},
        baselines=FakeBaselines(),
    )
    beside_a_baseline.controller.metrics = metrics
    beside_a_baseline.tick(40)
    assert _value(metrics, value, check="ttft_p95", revision="baseline") == pytest.approx(0.2)
    assert _value(metrics, value, check="ttft_p95", revision="canary") == pytest.approx(0.4)
    # errors are judged against the stable revision and the baseline pooled
    assert _value(metrics, value, check="error_ratio", revision="stable+baseline") == 0
    # the line the first rollout drew against the stable revision is gone, not left stale
    assert _value(metrics, value, check="ttft_p95", revision="stable") is None
    assert _value(metrics, value, check="error_ratio", revision="stable") is None
