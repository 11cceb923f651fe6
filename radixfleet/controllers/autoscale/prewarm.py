"""Pre-warming: which prompt prefixes a new replica is sent before it takes traffic, and when.

A new replica starts with an empty prefix cache, so its first minute misses what its peers hit.
The gateway sees every prompt and counts their prefixes (`radixfleet.prefixes.PrefixPopularity`);
`plan` picks the prefixes worth most that fit the share of the new replica's KV cache the spec
allows (`radixfleet.prefixes.hottest`). The replica is sent one short request per pick (one
output token) and joins the gateway when they are done.

`may_hold_back` keeps warm-up from delaying any request it could serve: a replica is held back
only while another replica of its revision serves, no request is held for want of a replica
(a model waking from zero, requests queued in the activator: they take the replica at once),
and the serving replicas' queues are within the autoscaler's allowance (`queuePerReplica`). The
spec's deadline ends warm-up in any case.

In a cluster a pod is held back by its labels: `gate` says which pods of the serving revision
leave their router's selection, which are warmed, and which come back
(radixfleet/controllers/autoscale/warming.py carries it out).

Pure: no I/O, no clock; the twin, the local fleet and the controller use the same functions.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from radixfleet.controllers.autoscale.spec import Prewarm
from radixfleet.labels import SERVING_POOL, WARMING_POOL
from radixfleet.prefixes import Prefix, PrefixPopularity, hottest
from radixfleet.twin.interfaces import Waiting, WarmUp

__all__ = [
    "Gate", "PodView", "Prefix", "PrefixPopularity", "Prewarming", "gate", "may_hold_back", "plan",
]  # fmt: skip


def plan(
    popularity: PrefixPopularity, spec: Prewarm, *, kv_blocks: int, now: float
) -> list[Prefix]:
    """The prefixes to send a new replica whose KV cache holds `kv_blocks` blocks, as the
    spec allows (`radixfleet.prefixes.hottest`)."""
    return hottest(popularity, kv_blocks=kv_blocks, kv_fraction=spec.kv_fraction,
                   min_hits=spec.min_hits, now=now)  # fmt: skip


def may_hold_back(*, serving: int, waiting: Waiting, allowance: float) -> bool:
    """Whether a ready replica may warm up before taking traffic: only while `serving` other
    replicas of its revision take the requests, none is held for want of a replica, and their
    schedulers queue no more than `allowance` requests each.

    A queue past the allowance is a backlog that new arrivals join, and the new replica would
    take them. One within it is a blip, not a backlog: requests that arrived during a long
    prefill wait for the next prefill batch at any load. Counted from one queued request, a
    tripled load of 4,096-token system prompts on two replicas refused the warm-up that came
    as its third replica was ready (tests/twin/test_prewarm.py's scale-up scenario: a first
    minute at 84% hits against 97%).
    """
    return serving > 0 and waiting.held == 0 and waiting.queued <= allowance * serving


class Prewarming:
    """One revision's pre-warming (the `Prewarmer` of radixfleet/twin/interfaces.py): the
    popularity of the prompts it was routed, and what each new replica is sent first. The twin's
    autoscaler and the local fleet's replica sets use it alike."""

    def __init__(self, spec: Prewarm, *, queue_allowance: float) -> None:
        self.spec = spec
        self.queue_allowance = queue_allowance  # requests queued per serving replica
        self.popularity = PrefixPopularity()

    def record(self, blocks: Sequence[Hashable], now: float) -> None:
        """The gateway routed a prompt: count its prefixes."""
        if self.spec.enabled:
            self.popularity.record(blocks, now)

    def warmup(
        self, *, kv_blocks: int, serving: int, waiting: Waiting, now: float
    ) -> WarmUp | None:
        """The hottest prefixes for a new replica, when it may be held back for them."""
        if not self.spec.enabled or not self.holds_back(serving=serving, waiting=waiting):
            return None
        prefixes = plan(self.popularity, self.spec, kv_blocks=kv_blocks, now=now)
        return WarmUp(prefixes, self.spec.deadline_seconds) if prefixes else None

    def holds_back(self, *, serving: int, waiting: Waiting) -> bool:
        """Whether a warming replica may stay out of traffic now (`may_hold_back`)."""
        return may_hold_back(serving=serving, waiting=waiting, allowance=self.queue_allowance)


# ---- in a cluster: which pods are taken out of their router's selection, and put back -------


@dataclass(frozen=True)
class PodView:
    """A pod of the serving revision as pre-warming sees it
    (radixfleet/controllers/autoscale/warming.py).

    `pool` is its `radixfleet.io/pool` label ("" without one: a revision made before it, never
    gated); `ready_for_s` how long it has been ready (None: not ready); `warmed` whether it
    was taken out once already (it never is twice); `pd_role` whether it is a prefill or a
    decode of a prefill/decode pair."""

    name: str
    pool: str
    ready_for_s: float | None
    warmed: bool = False
    pd_role: bool = False


# Why a prefill/decode role is never held back: it has nothing to warm. A prefill answers only
# requests that carry a bootstrap room (SGLang's 400 otherwise), and a decode keeps no radix
# cache of the KV it receives.
NOT_FOR_PD_ROLES = "not warmed: a prefill/decode role"


@dataclass(frozen=True)
class Gate:
    """What to do with the revision's pods this tick."""

    hold: tuple[str, ...] = ()  # not ready yet: out of the router's selection before it is
    warm: tuple[str, ...] = ()  # held and ready: send it the hottest prefixes
    release: tuple[tuple[str, str], ...] = ()  # back to `serving`, and why


def gate(
    pods: Sequence[PodView],
    *,
    waiting: Waiting | None,
    spec: Prewarm,
    allowance: float,
    warming_now: frozenset[str] = frozenset(),
) -> Gate:
    """Hold a new pod out of its router's selection while `may_hold_back` allows, warm it once
    ready, release it when it may no longer wait or its deadline has passed since it was
    ready. `waiting` None (no metrics yet) holds nothing back: a pod serves cold rather than
    wait on what is not known. `warming_now` are pods whose warm-up runs already. A
    prefill/decode role's pods are never held, and released if found held."""
    if any(p.pd_role for p in pods):
        held = [p.name for p in pods if p.pool == WARMING_POOL]
        return Gate(release=tuple((name, NOT_FOR_PD_ROLES) for name in held))
    serving = sum(1 for p in pods if p.pool == SERVING_POOL and p.ready_for_s is not None)
    allowed = waiting is not None and spec.enabled and may_hold_back(
        serving=serving, waiting=waiting, allowance=allowance
    )  # fmt: skip
    hold, warm, release = [], [], []
    for pod in pods:
        if pod.pool == SERVING_POOL and pod.ready_for_s is None and not pod.warmed and allowed:
            hold.append(pod.name)
        elif pod.pool != WARMING_POOL:
            continue
        elif not allowed:
            release.append((pod.name, "needed: another request would wait for it"))
        elif pod.ready_for_s is not None and pod.ready_for_s > spec.deadline_seconds:
            release.append((pod.name, f"deadline: ready for {pod.ready_for_s:.0f} s"))
        elif pod.ready_for_s is not None and pod.name not in warming_now:
            warm.append(pod.name)
    return Gate(hold=tuple(hold), warm=tuple(warm), release=tuple(release))
