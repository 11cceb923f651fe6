"""The replica model: one SGLang replica in explicit time, shared by the emulator and the twin.

No I/O and no clock inside: callers pass `now`. See :mod:`radixfleet.replica.model` (and
its scheduler, :mod:`radixfleet.replica.scheduler`, and its LoRA adapters,
:mod:`radixfleet.replica.lora`).
"""

from radixfleet.replica.clock import Clock, MonotonicClock, VirtualClock
from radixfleet.replica.faults import HEALTHY, Faults
from radixfleet.replica.lora import AdapterSpec, EvictionPolicy, LoadResult, LoraError, LoraSpec
from radixfleet.replica.model import Health, ReplicaModel
from radixfleet.replica.radix import CacheFullError, RadixCache
from radixfleet.replica.request import (
    Event,
    EventKind,
    Phase,
    RejectedError,
    RejectReason,
    Request,
    RequestSpec,
)
from radixfleet.replica.scheduler import SchedulePolicy
from radixfleet.replica.stats import CounterValues, ReplicaStats

__all__ = [
    "HEALTHY",
    "AdapterSpec",
    "CacheFullError",
    "Clock",
    "CounterValues",
    "Event",
    "EventKind",
    "EvictionPolicy",
    "Faults",
    "Health",
    "LoadResult",
    "LoraError",
    "LoraSpec",
    "MonotonicClock",
    "Phase",
    "RadixCache",
    "RejectReason",
    "RejectedError",
    "ReplicaModel",
    "ReplicaStats",
    "Request",
    "RequestSpec",
    "SchedulePolicy",
    "VirtualClock",
]
