"""A prefill/decode pair scales as one model: the counts of both roles from what `decide()`
recommends for each.

`decide()` runs once per role on that role's own signals: the prefill replicas on queued
prefill tokens and TTFT (their queue and `ttft_p95`), the decode replicas on running requests,
KV use and ITL. This rule puts the two answers together so that the pair never serves half a
model (llm-d's open question of coordinated P/D scale-to-zero):

1. A wake (any request waiting upstream for the model) brings at least one of each role.
2. Both roles are at zero together or neither is: a role that wants zero while its peer wants
   replicas keeps one (a prefill with no decode answers nothing; a decode with no prefill has
   no KV to receive).
3. So no decode replica ever runs without a prefill peer, and no prefill replica runs with no
   decode to hand its KV to.

Pure: no clock, no I/O; the controller, the local fleet and the twin call the same function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PairCounts:
    """Replica counts of a prefill/decode pair; `reason` says what the rule changed."""

    prefill: int
    decode: int
    reason: str = ""

    def __post_init__(self) -> None:
        if self.prefill < 0 or self.decode < 0:
            raise ValueError(f"replica counts must be >= 0, got {self.prefill}/{self.decode}")

    @property
    def asleep(self) -> bool:
        """Whether the whole pair is at zero."""
        return self.prefill == 0 and self.decode == 0


def pair_counts(*, prefill: int, decode: int, waiting: bool) -> PairCounts:
    """The pair's counts from each role's own recommendation.

    `prefill` and `decode` are what `decide()` recommended for each role, `waiting` whether a
    request waits upstream for the model (it must find both roles when it is let through).
    """
    if prefill < 0 or decode < 0:
        raise ValueError(f"recommended counts must be >= 0, got {prefill}/{decode}")
    if waiting and (prefill == 0 or decode == 0):
        return PairCounts(max(prefill, 1), max(decode, 1), "a request waits: wake both roles")
    if prefill == 0 and decode == 0:
        return PairCounts(0, 0, "both roles idle: the pair sleeps")
    if prefill == 0:
        return PairCounts(1, decode, "decode busy: keep a prefill peer")
    if decode == 0:
        return PairCounts(prefill, 1, "prefill busy: keep a decode peer")
    return PairCounts(prefill, decode)
