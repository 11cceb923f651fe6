"""Act: keep one router per serving revision, and the kopf handlers that run it.

Every InferenceService event wakes the kit's coalescing loop; a pass lists the InferenceServices,
the revisions and the routers, `decide`s (pure), applies what is missing or stale, and parks a
router (zero replicas) only after re-reading its InferenceService and finding its revision still
out of traffic (KServe may have moved traffic back between the list and the park). Without a
router image the controller halts: it logs once per pass and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Protocol

import kopf

from radixfleet.controllers.routers.decide import (
    Existing,
    Key,
    Plan,
    RevisionRef,
    decide,
    keyed_namespaces,
    wanted,
)
from radixfleet.controllers.routers.settings import ROUTER_IMAGE
from radixfleet.controllers.routers.spec import NAME, Router
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import INFERENCE_SERVICES
from radixfleet.kit.loop import Loop, register_loop
from radixfleet.kit.plugin import OperatorOptions

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0


class InferenceServices(Protocol):
    def everywhere(self) -> list[dict[str, Any]]: ...

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Revisions(Protocol):
    def listed(self) -> dict[Key, RevisionRef]: ...


class Routers(Protocol):
    def existing(self) -> dict[Key, Existing]: ...

    def apply(self, router: Router, *, image: str) -> None: ...

    def park(self, key: Key) -> None: ...

    def ensure_key(self, namespace: str) -> None:
        """Create the namespace's data-plane key Secret unless it exists (never read it)."""
        ...


@dataclass
class Controller:
    """The act layer: `reconcile` is one pass over the fleet."""

    isvcs: InferenceServices
    revisions: Revisions
    routers: Routers
    image: str | None
    keyed: set[str] = field(default_factory=set)  # namespaces known to hold the data-plane key

    def reconcile(self, *, now: datetime) -> Plan:
        del now  # routers follow KServe's status, not the clock
        isvcs = self.isvcs.everywhere()
        self._ensure_keys(keyed_namespaces(isvcs))
        if not self.image:
            log.warning("no router image (--router-image): routers are not managed")
            return Plan()
        existing = self.routers.existing()
        plan = decide(isvcs, self.revisions.listed(), existing, image=self.image)
        # One router refused (a namespace whose tenant access is not rendered: the operator may
        # write Deployments only where it is) holds back no other; the pass then fails, and the
        # loop tries it again.
        failed: list[KubeError] = []
        for router in plan.apply:
            _attempt(failed, partial(self._apply, router))
        for key in plan.park:
            _attempt(failed, partial(self._park, key, existing[key]))
        if failed:
            for error in failed[1:]:
                log.warning("routers: %s", error)
            raise failed[0]
        return plan

    def _apply(self, router: Router) -> None:
        assert self.image is not None
        self.routers.apply(router, image=self.image)
        log.info("router %s/%s applied", router.namespace, router.name)

    def _park(self, key: Key, found: Existing) -> None:
        if self._still_unwanted(key, found):
            self.routers.park(key)
            log.info("router %s/%s parked: its revision serves no traffic", *key)

    def _ensure_keys(self, namespaces: set[str]) -> None:
        # One namespace refusing its key (one being deleted refuses new objects) holds back
        # no other namespace's routers; it is tried again on the next pass.
        for namespace in sorted(namespaces - self.keyed):
            try:
                self.routers.ensure_key(namespace)
            except KubeError as error:
                log.warning("data-plane key of %s not made (%s); next pass", namespace, error)
                continue
            self.keyed.add(namespace)

    def _still_unwanted(self, key: Key, found: Existing) -> bool:
        isvc = self.isvcs.get(key[0], found.isvc)
        routers = wanted(isvc) if isvc is not None else None
        return routers is not None and key[1] not in {r.name for r in routers}


def _attempt(failed: list[KubeError], action: Callable[[], None]) -> None:
    try:
        action()
    except KubeError as error:
        failed.append(error)


def register(registry: kopf.OperatorRegistry, controller: Controller) -> Loop:
    """Add the routers' handlers to `registry`; nothing is registered on import."""
    loop = Loop(NAME, lambda now: controller.reconcile(now=now).verbs,
                resync_seconds=RESYNC_SECONDS)  # fmt: skip
    register_loop(registry, loop, watch=[INFERENCE_SERVICES])
    return loop


def kube_controller(options: OperatorOptions | None = None) -> Controller:
    """A Controller on the in-cluster (or kubeconfig) credentials."""
    from radixfleet.controllers.routers.kube import KubeRevisions, KubeRouters
    from radixfleet.kit.kube import KubeInferenceServices, api_client

    options = options or OperatorOptions()
    api = api_client()
    return Controller(KubeInferenceServices(api), KubeRevisions(api), KubeRouters(api),
                      image=options.setting(NAME, ROUTER_IMAGE))  # fmt: skip
