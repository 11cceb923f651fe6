"""A prefill/decode model's two AutoscalePolicies held to one rule: each role's decision put
together with its peer's last one by `pairs.pair_counts`; pure.

Each role is its own InferenceService (`<model>-prefill`, `<model>-decode`, labelled
`radixfleet.io/pd-role`) with its own AutoscalePolicy, named as its InferenceService (the
catalog renders them so), and decides on its own signals. Before a role acts, its count is
raised to what the pair rule wants given the desired count its peer's policy last recorded: a
role never goes to zero while its peer serves, and the pair sleeps only when both roles want
zero. A wake needs nothing here: the entry wakes both roles before it lets a request through
(radixfleet/entry/server.py), and a floor that raises one role raises its peer on the peer's
next tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from radixfleet import labels
from radixfleet.controllers.autoscale.decide import Decision
from radixfleet.controllers.autoscale.pairs import pair_counts

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class Peer:
    """The other role of a prefill/decode model: its InferenceService (and policy) name."""

    role: str  # the role of the InferenceService being decided
    name: str  # the peer's InferenceService, and its AutoscalePolicy


def peer_of(isvc: Mapping[str, Any] | None) -> Peer | None:
    """The peer of a prefill/decode role's InferenceService; None for any other model."""
    meta = (isvc or {}).get("metadata") or {}
    found = meta.get("labels") or {}
    role, model = found.get(labels.PD_ROLE), found.get(labels.MODEL)
    if role not in ROLES or not model:
        return None
    other = ROLES[1 - ROLES.index(role)]
    return Peer(role=role, name=f"{model}-{other}")


def paired(decision: Decision, *, role: str, peer_desired: int) -> Decision:
    """`decision` for `role`, raised where the pair rule wants more of it than it asked."""
    mine, theirs = decision.desired, peer_desired
    counts = (pair_counts(prefill=mine, decode=theirs, waiting=False) if role == "prefill"
              else pair_counts(prefill=theirs, decode=mine, waiting=False))  # fmt: skip
    wanted = counts.prefill if role == "prefill" else counts.decode
    if wanted <= mine:
        return decision
    status = decision.status.model_copy(update={"desired": wanted})
    reason = f"{decision.reason}; {counts.reason}"
    return replace(decision, desired=wanted, reason=reason, status=status)
