"""The CanaryPolicy's CustomResourceDefinition, generated from its spec type (`spec.py`).

The fields, defaults, bounds and CEL rules are the type's; here are the names, the columns
`kubectl get` shows, the descriptions `kubectl explain` shows, and the status schema (data
beside this module: the status types in `state.py` are dataclasses).
"""

from __future__ import annotations

from typing import Any

from radixfleet.controllers.canary.spec import API_VERSION, KIND, PLURAL, CanaryPolicySpec
from radixfleet.kit.crd import AGE, Column, Names, Resource, data, definition
from radixfleet.labels import GROUP

DESCRIPTIONS = {
    "": "How a new predictor revision is stepped, judged, promoted or rolled back.",
    "steps": "canaryTrafficPercent values in order. The canary is judged at each step below 100 "
    "and promoted (the field removed) after the last; a trailing 100 is allowed and only says "
    "so.",
    "intervalSeconds": "Seconds between analyses; also the window of every query.",
    "threshold": "Failed analyses in one rollout before it is rolled back.",
    "minRequests": "Requests each compared revision must have served in the window before an "
    "analysis counts; fewer halt the rollout (neither pass nor fail).",
    "significance": "One-sided p-value below which a canary worse than a relative bound fails "
    "(Mann-Whitney U on latency histograms, Fisher's exact test on errors); above it the "
    "difference may be noise and the rollout halts for more data.",
    "checks": "Limits on the canary; every one must pass for a step to advance.",
    "checks[].metric": "ttftP95 and itlP95 in seconds (SGLang's histograms), errorRate as the "
    "fraction of 5xx responses, cacheHitRate as cached/prompt tokens.",
    "checks[].relativeToStable": "For latencies and errors the canary may be at most this "
    "multiple of stable (plus slack); for the hit rate at least this multiple (minus slack).",
    "checks[].slack": "Added to the relative limit, in the metric's unit.",
    "checks[].limit": "Absolute bound, in the metric's unit (upper, or lower for the hit rate).",
    "manualGates": "Steps the controller waits at for `radixfleet canary resume` before sending "
    "that share of traffic (100 gates the promotion).",
    "paused": "Hold every rollout under this policy where it is.",
    "progressDeadlineSeconds": "Seconds a rollout may go without advancing. A canary revision "
    "not ready by then is rolled back; missing metrics only keep it halted and say so.",
    "baseline": "Run a baseline beside each canary (the stable model on as many replicas as the "
    "canary, sent as much traffic) and judge latency and cache hit rate against it, errors "
    "against the stable revision and the baseline pooled.",
}

COLUMNS = (
    Column("Steps", "string", ".spec.steps"),
    Column("Interval", "integer", ".spec.intervalSeconds"),
    Column("Threshold", "integer", ".spec.threshold"),
    Column("Paused", "boolean", ".spec.paused"),
    Column("Active", "integer", ".status.activeRollouts", "Rollouts in progress under this policy"),
    AGE,
)


def crd() -> dict[str, Any]:
    """The CanaryPolicy's CRD."""
    return definition(
        Resource(
            group=GROUP,
            version=API_VERSION,
            names=Names(KIND, PLURAL, short_names=("cpol",)),
            scope="Namespaced",
            spec=CanaryPolicySpec,
            descriptions=DESCRIPTIONS,
            status=data("radixfleet.controllers.canary", "status-schema.yaml"),
            columns=COLUMNS,
        )
    )
