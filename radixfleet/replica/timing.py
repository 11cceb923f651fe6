"""Forward-pass durations from the profile, including runs of decode steps in closed form.

A run of `j` decode steps over a batch of `B` requests holding `L` context tokens at its start
grows the context by `B` each step, so its duration is a quadratic in `j`:

    T(j) = s * (j * (a + c*B + d*L) + d * B * j * (j - 1) / 2)

with `a, c, d` the profile's decode coefficients and `s` the slow-down factor. Solving it lets
the model skip over many decode steps in O(1), which is what makes the twin fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from radixfleet.profile import ReplicaProfile


def prefill_pass_seconds(
    profile: ReplicaProfile, *, chunks: Iterable[tuple[int, int]], slowdown: float
) -> float:
    """One prefill forward pass over `(new_tokens, cached_tokens)` chunks: one overhead; none
    when no chunk has a token to compute (a P/D decode replica's batch of received KV)."""
    chunks = list(chunks)
    if all(new_tokens <= 0 for new_tokens, _cached in chunks):
        return 0.0
    total = profile.prefill_overhead_s
    for new_tokens, cached_tokens in chunks:
        total += profile.prefill_seconds(new_tokens, cached_tokens) - profile.prefill_overhead_s
    return total * slowdown


def decode_run_seconds(
    profile: ReplicaProfile, *, steps: int, batch: int, context: int, slowdown: float
) -> float:
    """Duration of `steps` consecutive decode steps, T(steps) above."""
    return DecodeCost(profile).run_seconds(steps, batch, context, slowdown)


def decode_steps_within(
    profile: ReplicaProfile,
    *,
    budget: float,
    batch: int,
    context: int,
    slowdown: float,
    max_steps: int,
) -> int:
    """The most whole decode steps (at most `max_steps`) that finish within `budget` seconds."""
    return DecodeCost(profile).steps_within(budget, batch, context, slowdown, max_steps)


class DecodeCost:
    """A profile's decode coefficients, read once: a replica asks for T(j) on every event."""

    __slots__ = ("overhead", "per_context", "per_request")

    def __init__(self, profile: ReplicaProfile) -> None:
        self.overhead = profile.decode_overhead_s
        self.per_request = profile.decode_per_request_s
        self.per_context = profile.decode_per_context_token_s

    def run_seconds(self, steps: int, batch: int, context: int, slowdown: float) -> float:
        """T(steps) for a batch of `batch` requests holding `context` tokens at the start."""
        linear = self.overhead + self.per_request * batch + self.per_context * context
        quadratic = self.per_context * batch / 2
        return slowdown * (steps * linear + quadratic * steps * (steps - 1))

    def steps_within(
        self, budget: float, batch: int, context: int, slowdown: float, max_steps: int
    ) -> int:
        """The most whole steps (at most `max_steps`) with T(steps) <= `budget`."""
        # Callers pass back times this module computed; the slack absorbs their float rounding
        # so that a run asked to end at its own end time does end.
        budget += 1e-9 * (1.0 + abs(budget))
        if budget <= 0 or max_steps <= 0:
            return 0
        linear = self.overhead + self.per_request * batch + self.per_context * context
        quadratic = self.per_context * batch / 2
        linear, quadratic = linear * slowdown, quadratic * slowdown
        if linear <= 0 and quadratic <= 0:
            return max_steps  # a profile with free decode steps: everything is done at once
        # T(j) = quadratic*j^2 + (linear - quadratic)*j; solve T(j) = budget for j.
        b = linear - quadratic
        if quadratic > 0:
            guess = (-b + math.sqrt(b * b + 4 * quadratic * budget)) / (2 * quadratic)
        else:
            guess = budget / b
        steps = min(max_steps, max(0, int(guess)))
        # Float rounding can put the guess one off either way.
        while steps < max_steps and _run(quadratic, b, steps + 1) <= budget:
            steps += 1
        while steps > 0 and _run(quadratic, b, steps) > budget:
            steps -= 1
        return steps


def _run(quadratic: float, b: float, steps: int) -> float:
    return quadratic * steps * steps + b * steps
