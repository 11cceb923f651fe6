"""What a run records: one row per request, one per replica lifetime, one per decision.

Columns are compact typed arrays so an hour of a thousand requests a second fits in memory and
crosses a process boundary cheaply; everything else (percentiles, windows, ratios) is computed
from them at the end by :mod:`radixfleet.twin.results`.
"""

from __future__ import annotations

import enum
import math
from array import array
from dataclasses import dataclass, field


class Status(enum.IntEnum):
    """How a request ended."""

    OK = 0
    SERVER_ERROR = 1  # every attempt answered 5xx (not ready, injected error)
    ABORTED = 2  # the replica died under it
    REGION_DOWN = 3  # its region's endpoint refused the connection
    TIMEOUT = 4  # buffered for a replica longer than the request timeout
    THROTTLED = 5  # refused by the tenant's budget (429)
    TOO_LONG = 6  # beyond the model's context (400)
    NO_SERVICE = 7  # sent to a region that does not serve its model
    UNFINISHED = 8  # still running when the run ended: neither a success nor a failure


@dataclass
class RequestLog:
    """Per request: arrival index, where and how it was served, and its latencies."""

    index: array[int] = field(default_factory=lambda: array("q"))
    region: array[int] = field(default_factory=lambda: array("h"))
    revision: array[int] = field(default_factory=lambda: array("b"))
    status: array[int] = field(default_factory=lambda: array("b"))
    cold: array[int] = field(default_factory=lambda: array("b"))
    ttft: array[float] = field(default_factory=lambda: array("d"))
    itl: array[float] = field(default_factory=lambda: array("d"))
    prompt: array[int] = field(default_factory=lambda: array("l"))
    output: array[int] = field(default_factory=lambda: array("l"))
    cached: array[int] = field(default_factory=lambda: array("l"))
    # Of `cached`, the tokens loaded from HiCache's host tier and from its storage backend.
    host_cached: array[int] = field(default_factory=lambda: array("l"))
    storage_cached: array[int] = field(default_factory=lambda: array("l"))
    ended: array[float] = field(default_factory=lambda: array("d"))
    # Seconds the serving replica had taken traffic when the request reached it (inf for the
    # scenario's first replicas; NaN when no replica served it).
    replica_age: array[float] = field(default_factory=lambda: array("d"))

    def add(
        self,
        *,
        index: int,
        region: int,
        revision: int,
        status: Status,
        cold: bool,
        ttft: float,
        itl: float,
        prompt: int,
        output: int,
        cached: int,
        ended: float,
        replica_age: float = math.nan,
        host_cached: int = 0,
        storage_cached: int = 0,
    ) -> None:
        """One finished or failed request; NaN for latencies it does not have."""
        self.index.append(index)
        self.region.append(region)
        self.revision.append(revision)
        self.status.append(int(status))
        self.cold.append(cold)
        self.ttft.append(ttft)
        self.itl.append(itl)
        self.prompt.append(prompt)
        self.output.append(output)
        self.cached.append(cached)
        self.host_cached.append(host_cached)
        self.storage_cached.append(storage_cached)
        self.ended.append(ended)
        self.replica_age.append(replica_age)

    def extend(self, other: RequestLog) -> None:
        """Append another log's rows (another worker's regions)."""
        for name in self.__dataclass_fields__:
            getattr(self, name).extend(getattr(other, name))

    def __len__(self) -> int:
        return len(self.index)


@dataclass(frozen=True)
class ReplicaSpan:
    """One replica from scheduling to removal: what it cost in GPU time, and where its start
    went: scheduled (`created_at`), on a node with its GPUs (`booted_at`), healthy
    (`ready_at`), sent its first request (`routable_at`; later than ready while it warms up).
    Infinite: it never got there. `initial`: one of the scenario's first replicas."""

    region: str
    model: str
    revision: int
    created_at: float
    removed_at: float
    gpus: int
    initial: bool = False
    booted_at: float = math.inf
    ready_at: float = math.inf
    routable_at: float = math.inf

    @property
    def gpu_seconds(self) -> float:
        """GPUs held times seconds held, cold start included."""
        return (self.removed_at - self.created_at) * self.gpus


@dataclass(frozen=True)
class DecisionRecord:
    """A policy decision worth showing: scaling, traffic shifts, canary steps."""

    at: float
    kind: str  # "canary", "traffic", "fault"
    region: str
    model: str
    detail: str


@dataclass(frozen=True)
class Sample:
    """A service's replica counts at one sampling time."""

    at: float
    region: str
    model: str
    ready: int
    active: int
    buffered: int
    # HiCache's tiers, in bytes: the host pools of its replicas (used, and their size) and the
    # storage backend the model shares in the region; 0 without tiers.
    host_used_bytes: int = 0
    host_total_bytes: int = 0
    storage_used_bytes: int = 0
