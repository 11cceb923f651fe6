"""Flagger's canary analysis with its default settings, as a twin canary policy (a baseline).

Modelled on Flagger's scheduler (fluxcd/flagger, `advanceCanary`) with what a user gets without
tuning: one iteration every `interval` (60 s), `threshold` 1, traffic in `stepWeight` steps of 10
up to `maxWeight` 50 (the values of Flagger's tutorials; it has no default step), and only its
two builtin checks: request-success-rate at least 99% and request-duration p99 at most 500 ms.
Flagger knows nothing of LLMs: request-duration is the whole request, which for a streamed
answer runs from arrival to the last token. `flagger_ttft` is the obvious adaptation, the same
500 ms on the time to first token instead.

Each iteration, once the canary is ready: the first one moves it to `stepWeight` unjudged; each
later one first rolls back if `threshold` failed analyses have accumulated, else runs the checks.
A failed check counts, and so does a check without values: Flagger's "Halt advancement no values
found" still returns a failed analysis. A passed analysis advances by `stepWeight`, or promotes at
`maxWeight`. Error rates are the replicas' 5xx share, as radixfleet's judge reads them.

Named in a twin scenario as `canary_flagger:flagger_defaults` (this folder on `sys.path`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from radixfleet.twin.interfaces import CanaryObservation, CanaryStep


@dataclass(frozen=True)
class FlaggerSettings:
    """A Flagger Canary's `analysis` block, defaults as described above."""

    interval_s: float = 60.0
    threshold: int = 1
    step_weight: int = 10
    max_weight: int = 50
    min_success_rate: float = 0.99
    max_duration_s: float = 0.5
    duration: Literal["request", "ttft"] = "request"


class Flagger:
    """One Flagger canary analysis; holds its failed-check count and iteration like the CR."""

    baseline = False  # Flagger compares the canary with fixed thresholds, not with a baseline

    def __init__(self, settings: FlaggerSettings | None = None) -> None:
        self.settings = settings or FlaggerSettings()
        self.tick_s = self.settings.interval_s
        self.window_s = self.settings.interval_s
        self.failed = 0
        self.started = False
        self.last_failure = ""

    def step(self, observed: CanaryObservation, now: float) -> CanaryStep:
        """One iteration of Flagger's scheduler."""
        s = self.settings
        if self.failed >= s.threshold:
            reached = f"failed checks threshold reached {s.threshold}"
            return CanaryStep(rollback=True, reason=f"{reached} ({self.last_failure})")
        if not observed.canary_ready:
            return CanaryStep(reason="canary not ready: waiting for rollout to finish")
        if not self.started:
            self.started = True
            return CanaryStep(weight=s.step_weight, reason="starting canary analysis")
        problem = self.failed_check(observed)
        if problem is not None:
            self.failed += 1
            self.last_failure = problem
            return CanaryStep(reason=f"halt advancement: {problem}")
        if observed.weight >= s.max_weight:
            return CanaryStep(promote=True, reason="copying template spec to primary")
        weight = min(observed.weight + s.step_weight, s.max_weight)
        return CanaryStep(weight=weight, reason=f"advance canary weight {weight}")

    def failed_check(self, observed: CanaryObservation) -> str | None:
        """Why the builtin checks fail this window, or None when both pass."""
        s = self.settings
        error_rate = observed.measured.canary.error_rate
        if error_rate is None:
            return "no values found for metric request-success-rate"
        if 1.0 - error_rate < s.min_success_rate:
            return f"success rate {100 * (1 - error_rate):.2f}% < {100 * s.min_success_rate:g}%"
        if s.duration == "request":
            duration = observed.canary_duration_p99_s
        else:
            duration = observed.canary_ttft_p99_s
        if duration is None:
            return "no values found for metric request-duration"
        if duration > s.max_duration_s:
            return f"request duration {duration * 1000:.0f}ms > {s.max_duration_s * 1000:.0f}ms"
        return None


def flagger_defaults(_ctx: Any) -> Flagger:
    """Flagger as installed: its builtin checks on whole requests."""
    return Flagger()


def flagger_ttft(_ctx: Any) -> Flagger:
    """Flagger with its request-duration limit read on the time to first token."""
    return Flagger(FlaggerSettings(duration="ttft"))
