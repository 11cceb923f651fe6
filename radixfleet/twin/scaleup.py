"""Where a burst's seconds go: the scale-up behind one burst, read from a twin run's records.

For a burst from `start_s` for `length_s`, the replicas scheduled for it (after its start,
before its end; not the scenario's first ones) and, for each, the seconds from the burst's
start to its scheduling (the autoscaler noticing and deciding), on to a node with its GPUs
(nothing on a warm GPU; a new node and the weights from the model store otherwise), to its
health check (the cold start: container, weights from disk, CUDA graphs), and to its first
request (pre-warming). Beside them, how the burst's requests fared before its first new
replica took traffic and after: the first seconds of a burst decide its attainment.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from radixfleet.twin.epochs import RunRecord
from radixfleet.twin.results import Columns
from radixfleet.twin.workload import Workload


@dataclass(frozen=True)
class ScaleUp:
    """One burst's scale-up; phase lengths are medians over the replicas added for it."""

    start_s: float
    replicas: int  # scheduled for the burst
    decided_s: float  # from the burst's start to its first replica's scheduling
    node_s: float  # scheduled -> on a node with its GPUs (and, on a new node, the weights)
    cold_start_s: float  # on its node -> healthy
    warm_up_s: float  # healthy -> its first request
    first_routable_s: float  # from the burst's start to its first new replica's first request
    last_routable_s: float  # ... to its last one's (inf: one never took traffic)
    requests: int  # arrived during the burst and finished
    before_first: float  # share of them that arrived before a new replica took traffic
    attainment_before: float | None  # SLO attainment of those (None: there were none)
    attainment_after: float | None  # of the rest


def scale_up(
    record: RunRecord, workload: Workload, *, start_s: float, length_s: float
) -> ScaleUp | None:
    """The scale-up behind the burst at `start_s`; None when no replica was added for it.

    It reads every replica and request of the run: meant for a run of one region and one
    model, as the bursts benchmark's is."""
    end_s = start_s + length_s
    added = sorted(
        (s for s in record.spans if not s.initial and start_s <= s.created_at < end_s),
        key=lambda s: s.created_at,
    )
    if not added:
        return None
    first = min(s.routable_at for s in added)
    columns = Columns(record, workload)
    burst = (columns.arrival >= start_s) & (columns.arrival < end_s)
    before = burst & (columns.arrival < first)
    after = burst & ~before
    return ScaleUp(
        start_s=start_s,
        replicas=len(added),
        decided_s=added[0].created_at - start_s,
        node_s=_median([s.booted_at - s.created_at for s in added]),
        cold_start_s=_median([s.ready_at - s.booted_at for s in added]),
        warm_up_s=_median([s.routable_at - s.ready_at for s in added]),
        first_routable_s=first - start_s,
        last_routable_s=max(s.routable_at for s in added) - start_s,
        requests=int(burst.sum()),
        before_first=_share(before, burst),
        attainment_before=_attainment(columns.good, before),
        attainment_after=_attainment(columns.good, after),
    )


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]  # a phase some replica never reached
    return statistics.median(finite) if finite else math.inf


def _share(part: NDArray[np.bool_], whole: NDArray[np.bool_]) -> float:
    total = int(whole.sum())
    return int(part.sum()) / total if total else 0.0


def _attainment(good: NDArray[np.bool_], mask: NDArray[np.bool_]) -> float | None:
    n = int(mask.sum())
    return int((good & mask).sum()) / n if n else None
