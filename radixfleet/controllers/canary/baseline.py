"""When a rollout runs a baseline (`action`, every path), and which of the stable revision's
pods make it in a cluster (`carve`); pure.

A baseline is ensured while a rollout that asks for one goes on, from the moment its canary is
ready (until then the stable revision keeps every pod), and released when one may be left: the
policy asks for baselines (one a previous controller started may be unrecorded), or the last
status recorded one. A policy that never asked costs no call at all.

In a cluster the baseline costs no GPU: it is carved out of the stable revision, whose pods
carry `radixfleet.io/pool` (rendered InferenceServices give it to their predictor pods). While
a rollout asks for one, as many of the stable revision's ready `serving` pods as the canary has
ready (at least one) are relabelled `baseline`, never its last serving one; the stable
revision's router selects `serving` pods and the baseline's router `baseline` ones
(radixfleet/controllers/routers), and the region entry sends the baseline as much as the canary
(radixfleet/entry). Knative goes on sizing the stable revision for all of its pods, whose
queue-proxies count the baseline's requests too.

A pod of the baseline that is no longer ready goes back to `serving` (its replacement is carved
at the next tick); a revision whose pods carry no pool label, or whose last serving pod would be
taken, has no baseline (`Carving.possible` is False) and the canary is judged against the stable
revision. When the stable revision scales down, the autoscaler drains a baseline's pods last
(their deletion cost is the highest: `radixfleet.controllers.autoscale.victims.drain_last`); one
removed all the same (a scale to fewer pods than the baseline holds) is replaced at the next tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from radixfleet.controllers.canary.state import Observed, RolloutStatus
from radixfleet.labels import BASELINE_POOL, SERVING_POOL

Action = Literal["ensure", "release"] | None


def action(
    *, asked: bool, observed: Observed, before: RolloutStatus | None, status: RolloutStatus | None
) -> Action:
    """What to do with the rollout's baseline this tick; `status` is the one being decided."""
    runs = status is not None and status.baseline is not None
    ongoing = status is not None and not status.phase.final
    both = observed.canary_revision is not None and observed.stable_revision is not None
    if asked and ongoing and both and (observed.canary_ready or runs):
        return "ensure"
    recorded = runs or (before is not None and before.baseline is not None)
    return "release" if asked or recorded else None


@dataclass(frozen=True)
class Pod:
    """A predictor pod of the stable or the canary revision, as the carving sees it."""

    name: str
    revision: str
    pool: str  # its radixfleet.io/pool label ("" without one)
    ready: bool


@dataclass(frozen=True)
class Carving:
    """The pool labels to set, and the baseline's ready pods once they are."""

    moves: tuple[tuple[str, str], ...] = ()
    ready: int = 0
    possible: bool = True


def carve(pods: Sequence[Pod], *, stable: str, canary: str) -> Carving:
    """The baseline of `stable`'s pods sized to `canary`'s ready pods."""
    canary_ready = sum(p.ready for p in pods if p.revision == canary)
    mine = sorted((p for p in pods if p.revision == stable), key=lambda p: p.name)
    held = [p for p in mine if p.pool == BASELINE_POOL and p.ready]
    serving = [p for p in mine if p.pool == SERVING_POOL and p.ready]
    want = min(max(1, canary_ready), len(held) + len(serving) - 1)
    kept = held[: max(want, 0)]
    taken = serving[: max(want - len(kept), 0)]
    back = [p for p in mine if p.pool == BASELINE_POOL and p not in kept]
    moves = [(p.name, BASELINE_POOL) for p in taken] + [(p.name, SERVING_POOL) for p in back]
    return Carving(tuple(moves), len(kept) + len(taken), possible=want > 0)


def release(pods: Sequence[Pod]) -> tuple[tuple[str, str], ...]:
    """Every baseline pod back to serving."""
    return tuple((p.name, SERVING_POOL) for p in pods if p.pool == BASELINE_POOL)
