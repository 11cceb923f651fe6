"""The P/D pair's scaling on the local fleet (radixfleet/localfleet/pairs.py) over replica sets
that record what they were asked: the order that keeps a decode replica from running without
a prefill peer, which a real fleet shows only when the timing is unlucky."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from radixfleet.controllers.autoscale.pairs import pair_counts
from radixfleet.localfleet.pairs import DecodeRole, PairSet, PrefillRole
from radixfleet.localfleet.replica import ReplicaRole
from radixfleet.localfleet.replicas import ReplicaSet
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.localfleet.spec import DisaggregationSpec, ModelSpec


class RecordingSet:
    """A replica set that records its scale calls; its replicas exist when the test says."""

    def __init__(self, name: str, replicas: int, role: ReplicaRole, calls: list[str]) -> None:
        self.name, self.role, self.calls = name, role, calls
        self.count, self.ready = replicas, replicas
        self.region, self.revision, self.events = "r", "m-predictor-00001", []

    def scale_to(self, replicas: int) -> int:
        self.calls.append(f"{self.name}={replicas}")
        self.count = replicas
        return replicas

    def desired(self) -> int:
        return self.count

    def ready_count(self) -> int:
        return self.ready

    def replicas(self) -> list[ReplicaInfo]:
        return [
            ReplicaInfo(f"{self.name}-{i}", "", ReplicaState.READY, 0.0, 0.0)
            for i in range(self.ready)
        ]


def pair_of(prefill: int, decode: int) -> tuple[PairSet, dict[str, RecordingSet], list[str]]:
    calls: list[str] = []
    sets: dict[str, RecordingSet] = {}
    spec = ModelSpec(
        name="m", replicas=min(prefill, decode),
        disaggregation=DisaggregationSpec(prefill=prefill, decode=decode),
    )  # fmt: skip

    def make_set(role_spec: ModelSpec, name: str, role: ReplicaRole) -> ReplicaSet:
        sets[name] = RecordingSet(name, role_spec.replicas, role, calls)
        return cast(ReplicaSet, sets[name])

    pair = PairSet(spec, make_set=make_set, rule=pair_counts, host="127.0.0.1")
    return pair, sets, calls


def test_the_pair_sleeps_decode_first_then_prefill() -> None:
    async def scenario() -> list[str]:
        pair, sets, calls = pair_of(1, 1)
        assert pair.scale_to(0) == 0
        await asyncio.sleep(0.2)
        assert calls == ["decode=0"]  # the decode replica still runs: the prefill stays
        sets["decode"].ready = 0
        await asyncio.sleep(0.2)
        return calls

    assert asyncio.run(scenario()) == ["decode=0", "prefill=0"]


def test_a_wake_during_the_sleep_keeps_the_prefill() -> None:
    async def scenario() -> list[str]:
        pair, sets, calls = pair_of(1, 1)
        pair.scale_to(0)
        pair.scale_to(1)  # a request came
        sets["decode"].ready = 0
        await asyncio.sleep(0.2)
        return calls

    assert "prefill=0" not in asyncio.run(scenario())


def test_a_wake_brings_both_roles() -> None:
    async def scenario() -> list[str]:
        pair, _sets, calls = pair_of(0, 0)
        assert pair.scale_to(1) == 1
        return calls

    assert sorted(asyncio.run(scenario())) == ["decode=1", "prefill=1"]


def test_a_decode_replica_registers_only_once_a_prefill_serves() -> None:
    async def scenario() -> bool:
        _pair, sets, _calls = pair_of(0, 0)
        role = sets["decode"].role
        assert isinstance(role, DecodeRole)
        waiting = asyncio.ensure_future(role.before_register())
        await asyncio.sleep(0.2)
        held = not waiting.done()
        sets["prefill"].ready = 1
        await asyncio.wait_for(waiting, 5)
        return held

    assert asyncio.run(scenario())


def test_the_last_replica_of_a_role_is_not_drained_alone() -> None:
    async def scenario() -> bool:
        pair, _sets, _calls = pair_of(1, 1)
        return pair.drain("decode-0")

    assert asyncio.run(scenario()) is False


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_role_starts_with_sglangs_flags(role: str) -> None:
    _pair, sets, _calls = pair_of(1, 1)
    args, worker = sets[role].role.launch()
    flags: dict[str, Any] = dict(zip(args[::2], args[1::2], strict=True))
    assert flags["--disaggregation-mode"] == role
    assert flags["--disaggregation-transfer-backend"] == "mooncake"
    assert worker.worker_type == role
    if role == "prefill":
        assert isinstance(sets[role].role, PrefillRole)
        assert worker.fields()["bootstrap_port"] == int(flags["--disaggregation-bootstrap-port"])
    else:
        assert "bootstrap_port" not in worker.fields()  # smg applies one to prefill workers only


def test_a_wake_with_one_role_down_keeps_the_other_roles_replicas() -> None:
    async def scenario() -> list[str]:
        pair, sets, calls = pair_of(2, 1)
        sets["decode"].ready = 0  # the decode replica died; the two prefills serve on
        pair.scale_to(1)  # the entry's wake: no pair serves
        return calls

    assert sorted(asyncio.run(scenario())) == ["decode=1", "prefill=2"]
