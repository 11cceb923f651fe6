"""Act: one pass of the LoRA controller in a cluster, and the kopf handlers that run it.

A pass lists the InferenceServices, takes those on the LoRA runtime, observes each one's ready
pods and the adapters they hold (`LoraPods`) and its adapters' demand (`AdapterDemand`),
`decide`s (pure) and carries out the loads and unloads through each pod's SGLang API. The
cluster has no per-adapter demand source yet (SGLang exports only its LoRA pool's slots; the
region entry, which sees every request's adapter, does not publish its counts), so the demand
port answers None and every pass halts, changing nothing: the controller is opt-in until it
has one (README.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import kopf

from radixfleet.controllers.lora.decide import decide
from radixfleet.controllers.lora.observed import Action, Decision, Demand, Observed, Replica
from radixfleet.controllers.lora.spec import NAME, AdapterPolicy
from radixfleet.kit.kube import INFERENCE_SERVICES
from radixfleet.kit.loop import Loop, register_loop
from radixfleet.kit.plugin import OperatorOptions

log = logging.getLogger(__name__)

LORA_RUNTIME = "sglang-lora"
RESYNC_SECONDS = 30.0


class InferenceServices(Protocol):
    def everywhere(self) -> list[dict[str, Any]]: ...


class LoraPods(Protocol):
    def replicas(self, isvc: Mapping[str, Any]) -> tuple[Replica, ...]: ...

    def act(self, namespace: str, action: Action) -> None: ...


class AdapterDemand(Protocol):
    def demand(self, isvc: Mapping[str, Any]) -> tuple[Demand, ...] | None: ...


class NoDemandSource:
    """The cluster's demand port until the entry publishes requests by adapter: None (halt)."""

    def demand(self, isvc: Mapping[str, Any]) -> tuple[Demand, ...] | None:
        del isvc
        return None


def is_lora(isvc: Mapping[str, Any]) -> bool:
    model = ((isvc.get("spec") or {}).get("predictor") or {}).get("model") or {}
    return model.get("runtime") == LORA_RUNTIME


def owners_of(isvc: Mapping[str, Any]) -> dict[str, str | None]:
    """The adapters the InferenceService mounts, owned by its tenant: each tenant's base holds
    only its own and the shared ones (the catalog renders it so), so all are its tenant's to
    hold."""
    meta = isvc.get("metadata") or {}
    tenant = (meta.get("labels") or {}).get("radixfleet.io/tenant")
    uris = ((isvc.get("spec") or {}).get("predictor") or {}).get("storageUris") or []
    names = [u["mountPath"].rsplit("/", 1)[-1] for u in uris[1:] if "mountPath" in u]
    return dict.fromkeys(names, tenant)


@dataclass
class Controller:
    isvcs: InferenceServices
    pods: LoraPods
    demand: AdapterDemand = field(default_factory=NoDemandSource)
    policy: AdapterPolicy = field(default_factory=AdapterPolicy)

    def reconcile(self, now: datetime) -> dict[str, Decision]:
        """One pass over every LoRA InferenceService, by `namespace/name`."""
        made = {}
        for isvc in filter(is_lora, self.isvcs.everywhere()):
            meta = isvc["metadata"]
            seen = Observed(self.pods.replicas(isvc), self.demand.demand(isvc), owners_of(isvc))
            decision = decide(seen, self.policy, now.timestamp())
            if decision.halted:
                log.info("adapters of %s/%s: halted: %s", meta["namespace"], meta["name"],
                         decision.halted)  # fmt: skip
            for action in decision.actions:
                self.pods.act(meta["namespace"], action)
            made[f"{meta['namespace']}/{meta['name']}"] = decision
        return made


def register(registry: kopf.OperatorRegistry, controller: Controller) -> Loop:
    """Add the LoRA controller's handlers to `registry`; nothing is registered on import."""
    loop = Loop(NAME, lambda now: controller.reconcile(now), resync_seconds=RESYNC_SECONDS)
    register_loop(registry, loop, watch=[INFERENCE_SERVICES])
    return loop


def kube_controller(options: OperatorOptions | None = None) -> Controller:
    """A Controller on the in-cluster (or kubeconfig) credentials."""
    from radixfleet.controllers.lora.kube import KubeLoraPods
    from radixfleet.kit.kube import KubeInferenceServices, api_client

    del options  # no option of its own yet
    api = api_client()
    return Controller(KubeInferenceServices(api), KubeLoraPods(api))
