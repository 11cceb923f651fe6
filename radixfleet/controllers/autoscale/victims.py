"""Which replicas a scale-down drains first (`radixfleet.controllers.autoscale.decide` step 6),
and a canary's baseline kept to the last. Pure functions, as the rest of the decision."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from radixfleet.controllers.autoscale.state import (
    Observed,
    ReplicaMetrics,
    finite,
)


def choose_victims(observed: Observed, desired: int, *, cache_aware: bool) -> tuple[str, ...]:
    """The ready replicas to drain first when `desired` is below the current count.

    Starting replicas are removed before any ready one (they hold no cache, and Kubernetes'
    ReplicaSet deletes not-ready pods first), so only the rest are named. Cache-aware, the
    ready replicas whose prefix cache served the fewest prompt tokens per second go first
    (their hit rate when the token rate is unknown); ties, and cache-blind choices, go to the
    replica with the fewest running requests: it drains soonest.
    """
    count = observed.current - desired - observed.starting
    if count <= 0:
        return ()
    ranked = sorted(observed.replicas, key=lambda r: _drain_order(r, cache_aware))
    return tuple(r.name for r in ranked[:count])


def drain_last(order: Sequence[str], kept: Collection[str]) -> tuple[str, ...]:
    """`order` with the pods of `kept` moved to its end, each group in its order: a canary's
    baseline (radixfleet/controllers/canary/baseline.py) is drained only after every other pod of
    the revision."""
    return (*(p for p in order if p not in kept), *(p for p in order if p in kept))


def cache_value(replica: ReplicaMetrics) -> float:
    """What a replica's prefix cache is worth: cached prompt tokens/s (or its hit rate)."""
    rate = finite(replica.cached_tokens_rate)
    if rate is not None:
        return rate
    return finite(replica.hit_rate) or 0.0


def _drain_order(replica: ReplicaMetrics, cache_aware: bool) -> tuple[float, float, str]:
    value = cache_value(replica) if cache_aware else 0.0
    return (value, finite(replica.running) or 0.0, replica.name)
