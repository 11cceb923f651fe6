"""The LoRA controller's cluster pass on fakes that record: it halts without a demand source,
and carries out the decision's loads through the pods' API when it has one."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from radixfleet.controllers.lora.controller import Controller, is_lora, owners_of
from radixfleet.controllers.lora.observed import Action, Demand, Replica

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def lora_isvc(tenant: str = "support") -> dict[str, Any]:
    uris = [{"uri": "hf://meta-llama/m", "mountPath": "/mnt/models"},
            {"uri": "s3://a/support-tone", "mountPath": "/mnt/adapters/support-tone"}]  # fmt: skip
    predictor = {"model": {"runtime": "sglang-lora"}, "storageUris": uris}
    return {"metadata": {"namespace": "team-support", "name": "lora",
                         "labels": {"radixfleet.io/tenant": tenant}},
            "spec": {"predictor": predictor}}  # fmt: skip


class FakeIsvcs:
    def everywhere(self) -> list[dict[str, Any]]:
        plain = {"metadata": {"namespace": "team-search", "name": "chat"},
                 "spec": {"predictor": {"model": {"runtime": "sglang"}}}}  # fmt: skip
        return [lora_isvc(), plain]


class FakePods:
    def __init__(self) -> None:
        self.acted: list[tuple[str, Action]] = []

    def replicas(self, isvc: Mapping[str, Any]) -> tuple[Replica, ...]:
        return (Replica("10.0.0.1", "support", 2),)

    def act(self, namespace: str, action: Action) -> None:
        self.acted.append((namespace, action))


class WaitingDemand:
    def demand(self, isvc: Mapping[str, Any]) -> tuple[Demand, ...] | None:
        return (Demand("support", "support-tone", rps=1.0, waiting=1),)


def test_only_lora_models_and_their_mounted_adapters_are_seen() -> None:
    assert [is_lora(i) for i in FakeIsvcs().everywhere()] == [True, False]
    assert owners_of(lora_isvc()) == {"support-tone": "support"}


def test_without_a_demand_source_every_pass_halts_and_touches_nothing() -> None:
    pods = FakePods()
    made = Controller(FakeIsvcs(), pods).reconcile(NOW)
    assert made["team-support/lora"].halted and pods.acted == []


def test_with_demand_the_pass_loads_through_the_pods_api() -> None:
    pods = FakePods()
    Controller(FakeIsvcs(), pods, demand=WaitingDemand()).reconcile(NOW)
    assert pods.acted == [("team-support", Action("load", "10.0.0.1", "support-tone"))]
