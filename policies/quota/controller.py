"""Act: carry out the quota's plan on the cluster, and the kopf handlers that run it.

Borrowing ties every tenant's ceiling to the others' commitments, so the controller reconciles
the fleet as a whole, never one Tenant alone: observe everything, `decide` (pure), then write
the statuses that changed (first: they are the admission policy's input) and set the
ResourceQuotas that differ. Every step is idempotent; a reconcile that fails half-way is simply
run again.

kopf watches Tenants, InferenceServices and the controller's ResourceQuotas only to wake one
coalescing loop (`@kopf.on.event` handlers keep no state on the objects they see); the loop also
runs every `RESYNC_SECONDS`, which bounds how stale a status can be if an event is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from policies.quota.decide import Plan, decide
from policies.quota.metrics import GpuMetrics
from policies.quota.observe import observe
from policies.quota.ports import InferenceServices, ResourceQuotas, Secrets, Tenants
from policies.quota.spec import API_VERSION, PLURAL, QUOTA_NAME
from radixfleet import labels
from radixfleet.kit.errors import KubeError
from radixfleet.kit.metrics import METRICS, ControllerMetrics
from radixfleet.kit.plugin import OperatorOptions

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
DEBOUNCE_SECONDS = 1.0  # a burst of events (kubectl apply -k) makes one reconcile
RETRY_SECONDS = 5.0
NAME = "quota"


@dataclass
class Controller:
    """The act layer: ports in, plans carried out. `reconcile` is one pass over the fleet."""

    tenants: Tenants
    isvcs: InferenceServices
    quotas: ResourceQuotas
    secrets: Secrets
    metrics: GpuMetrics | None = None

    def reconcile(self, *, now: datetime) -> Plan:
        observed = observe(
            tenants=self.tenants, isvcs=self.isvcs, quotas=self.quotas, secrets=self.secrets
        )
        plan = decide(observed, now)
        self.act(plan)
        return plan

    def act(self, plan: Plan) -> None:
        for name, status in plan.statuses.items():
            self.tenants.write_status(name, status.to_wire())
        for quota in plan.quotas:
            self.quotas.set_hard(quota.namespace, tenant=quota.tenant, gpus=quota.hard)
            log.info("ResourceQuota %s/%s: %d GPUs", quota.namespace, QUOTA_NAME, quota.hard)
        if self.metrics is not None:
            self.metrics.update(plan.accounts)


# ---- kopf ----------------------------------------------------------------------------------


class Loop:
    """One reconcile at a time, woken by events, at least every `RESYNC_SECONDS`."""

    def __init__(self, controller: Controller, *, metrics: ControllerMetrics = METRICS) -> None:
        self.controller = controller
        self.wake = asyncio.Event()
        self.metrics = metrics

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=RESYNC_SECONDS)
            await asyncio.sleep(DEBOUNCE_SECONDS)
            self.wake.clear()
            await self.once()

    async def once(self) -> None:
        self.metrics.tick(NAME)
        try:
            # The kubernetes client blocks: keep kopf's event loop free while it works.
            plan = await asyncio.to_thread(self.controller.reconcile, now=datetime.now(UTC))
        except KubeError as error:
            self.metrics.error(NAME, temporary=error.temporary)
            log.warning("quota reconcile failed (%s); retrying", error)
            await asyncio.sleep(RETRY_SECONDS)
            self.wake.set()
            return
        self.metrics.decided(NAME, ["status"] * len(plan.statuses) + ["quota"] * len(plan.quotas))


def register(registry: kopf.OperatorRegistry, controller: Controller) -> Loop:
    """Add the quota's handlers to `registry`; nothing is registered on import."""
    loop = Loop(controller)
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start(**_: Any) -> None:
        # kopf's own bookkeeping stays in annotations (the operator's settings), never in
        # status: the status is the admission policy's input.
        tasks.append(asyncio.create_task(loop.run()))
        loop.wake.set()

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        for task in tasks:
            task.cancel()

    def wake(**_: Any) -> None:
        loop.wake.set()

    kopf.on.event(labels.GROUP, API_VERSION, PLURAL, registry=registry)(wake)
    kopf.on.event("serving.kserve.io", "v1beta1", "inferenceservices", registry=registry)(wake)
    kopf.on.event(
        "", "v1", "resourcequotas", registry=registry, labels={labels.MANAGED_BY: labels.MANAGER}
    )(wake)
    return loop


def kube_controller(options: OperatorOptions | None = None) -> Controller:
    """A Controller on the in-cluster (or kubeconfig) credentials."""
    from policies.quota.kube import (
        KubeInferenceServices,
        KubeResourceQuotas,
        KubeSecrets,
        KubeTenants,
    )
    from radixfleet.kit.kube import api_client

    options = options or OperatorOptions()
    api = api_client()
    return Controller(
        tenants=KubeTenants(api),
        isvcs=KubeInferenceServices(api),
        quotas=KubeResourceQuotas(api),
        secrets=KubeSecrets(api),
        metrics=GpuMetrics(region=options.region),
    )
