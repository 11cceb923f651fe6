"""Debts that outlive an entry replica: what each replica's buckets are owed, kept where the
replicas after it find them.

Each entry replica keeps its own ledger (radixfleet/controllers/quota/entry.py). A tenant that
streams past its budget owes tokens, and a replica that went away (an OOM kill, a drained node, a
rollout) used to take the debt with it: the tenant's next requests met a fresh, full replica. So
every replica writes what its buckets are owed into one ConfigMap, under its own key, every few
seconds; a replica's key that has not been written for a while, or that it wrote on its way out, is
an orphan, and the first live replica to claim it takes its debts on, less what has refilled since.
A claim is a write conditional on the ConfigMap's resourceVersion, so one orphan is never taken
on twice.

Owed, not the balance: what a bucket lacks from full, as of a wall-clock time. A replica starts
full, so adding what was owed back is exact, whatever share of a budget each replica holds. What
is lost is bounded: what the dead replica charged after its last write, `interval_s` at most.

Pure: time is an argument (the ledger's monotonic `now` and the wall clock's seconds `wall`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from radixfleet.controllers.quota.ledger import EPSILON_TOKENS, BucketKey, TokenLedger

log = logging.getLogger(__name__)

INTERVAL_S = 5.0  # how often a replica writes what it is owed
STALE_AFTER_S = 30.0  # a key not written for this long is an orphan (six missed writes)


@dataclass(frozen=True)
class Owed:
    """One replica's buckets' shortfalls from full, in tokens, as of `at` (wall-clock seconds);
    `final` when the replica wrote it on its way out (an orphan at once)."""

    at: float
    tokens: Mapping[BucketKey, float] = field(default_factory=dict)
    final: bool = False

    def to_wire(self) -> str:
        buckets = [[tenant, model, round(t, 3)] for (tenant, model), t in sorted(
            self.tokens.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]  # fmt: skip
        return json.dumps({"at": self.at, "final": self.final, "owed": buckets})

    @classmethod
    def from_wire(cls, text: str) -> Owed | None:
        """What a replica wrote; None, logged, for anything else (it is skipped, not guessed)."""
        try:
            found = json.loads(text)
            tokens = {
                (str(t), None if m is None else str(m)): float(n) for t, m, n in found["owed"]
            }
            return cls(at=float(found["at"]), tokens=tokens, final=bool(found["final"]))
        except (ValueError, TypeError, KeyError) as error:
            log.warning("an entry replica's ledger entry is unreadable (%s): skipped", error)
            return None


def owed(ledger: TokenLedger, *, now: float, wall: float) -> Owed:
    """What the ledger's buckets lack from full at `now` (`wall` on the wall clock)."""
    short = {key: b.capacity - b.at_time(now).level for key, b in dict(ledger.buckets).items()}
    return Owed(at=wall, tokens={k: t for k, t in short.items() if t > EPSILON_TOKENS})


def orphans(
    entries: Mapping[str, Owed], *, own: str, wall: float, stale_after_s: float = STALE_AFTER_S
) -> list[str]:
    """The replicas whose debts are nobody's now: gone (said so, or silent for too long)."""
    return sorted(
        replica
        for replica, entry in entries.items()
        if replica != own and (entry.final or wall - entry.at >= stale_after_s)
    )


def take_on(ledger: TokenLedger, orphan: Owed, *, now: float, wall: float) -> None:
    """Charge the ledger what `orphan` was owed, less what its buckets refilled since (a budget
    that is gone, or a debt repaid by now, adds nothing)."""
    elapsed = max(0.0, wall - orphan.at)
    for key, tokens in orphan.tokens.items():
        per_minute = ledger.rate(key)
        if per_minute is None:
            continue
        left = tokens - per_minute / 60.0 * elapsed
        if left > EPSILON_TOKENS:
            ledger.owe(key, left, now=now)


# ---- where the replicas keep it ---------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """The replicas' entries as read, and the version a claim is conditional on."""

    version: str
    entries: Mapping[str, str]


class LedgerStore(Protocol):
    def read(self) -> Stored: ...

    def claim(self, version: str, replicas: Sequence[str]) -> bool:
        """Remove the replicas' entries if nothing changed since `version`; False if it did."""
        ...

    def write(self, replica: str, text: str | None) -> None:
        """Set the replica's own entry (None: remove it)."""
        ...


@dataclass(frozen=True)
class Step:
    """One pass: the orphans to claim (from `version`) and what to write as this replica's own."""

    version: str
    claim: tuple[str, ...]
    adopted: tuple[Owed, ...]


def plan(
    stored: Stored, *, own: str, wall: float, first: bool, stale_after_s: float = STALE_AFTER_S
) -> Step:
    """What to claim of what was read. On a process's `first` pass its own name's entry is
    claimed too: a container restarted in its pod (an OOM kill) keeps the pod's name, and the
    entry is its previous life's."""
    entries = {r: e for r, e in ((r, Owed.from_wire(t)) for r, t in stored.entries.items()) if e}
    taken = set(orphans(entries, own=own, wall=wall, stale_after_s=stale_after_s))
    if first and own in entries:
        taken.add(own)
    return Step(stored.version, tuple(sorted(taken)), tuple(entries[r] for r in sorted(taken)))
