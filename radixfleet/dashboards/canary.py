"""The Canary dashboard: canary against stable for every check, the weight and the decisions."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from radixfleet import metrics_names as m
from radixfleet.dashboards.panels import Board, Filter, Q
from radixfleet.dashboards.uids import CANARY_UID

SEL = 'namespace=~"$namespace", isvc=~"$isvc"'
# How each check of metrics_names.CANARY_CHECKS is measured.
CHECK_UNITS = {
    "ttft_p95": "s",
    "itl_p95": "s",
    "error_ratio": "percentunit",
    "prefix_hit_ratio": "percentunit",
}


def build() -> Dashboard:
    """Rollouts in progress: what the judge compares and what it decided."""
    board = Board(
        uid=CANARY_UID,
        title="radixfleet / Canary",
        description="Metric-gated rollouts: canary against stable per check, the canary's "
        "traffic weight and the controller's decisions.",
        filters=[
            Filter("namespace", m.NAMESPACE, m.CANARY_WEIGHT.name, "Namespace"),
            Filter("isvc", m.ISVC, m.CANARY_WEIGHT.name, "InferenceService"),
        ],
    )
    _rollout(board.row("Rollout"))
    _checks(board.row("Checks: canary against stable"))
    return board.build()


def _rollout(board: Board) -> None:
    board.timeseries(
        "Canary weight",
        [Q(f"{m.CANARY_WEIGHT.name}{{{SEL}}}", "{{namespace}}/{{isvc}}")],
        unit="percent",
        width=8,
        max_value=100,
        description="canaryTrafficPercent: the share of traffic on the new revision.",
    )
    board.timeseries(
        "Decisions",
        [
            Q(
                f"sum by (isvc, decision) (increase({m.CANARY_DECISIONS.name}{{{SEL}}}[5m]))",
                "{{isvc}} {{decision}}",
            )
        ],
        unit="short",
        width=8,
        description="advance, hold, halt (metrics missing), promote and rollback, per 5 minutes.",
    )
    board.timeseries(
        "Failing checks",
        [
            Q(
                f"sum by (namespace, isvc) ({m.CANARY_CHECK_FAILED.name}{{{SEL}}})",
                "{{namespace}}/{{isvc}}",
            )
        ],
        unit="short",
        width=8,
        description="Checks the canary failed at the last analysis.",
    )


def _checks(board: Board) -> None:
    for check in m.CANARY_CHECKS:
        board.timeseries(
            check,
            [
                Q(
                    f'{m.CANARY_CHECK_VALUE.name}{{{SEL}, check="{check}"}}',
                    "{{isvc}} {{revision}}",
                )
            ],
            unit=CHECK_UNITS[check],
            description=f"The {check} of the canary and the stable revision at each analysis.",
        )
