"""Act: carry out the quota's plan on the cluster, and the kopf handlers that run it.

Borrowing ties every tenant's ceiling to the others' commitments, so the controller reconciles
the fleet as a whole, never one Tenant alone: observe everything, `decide` (pure), then write
the statuses that changed (first: they are the admission policy's input) and set the
ResourceQuotas that differ, each on its own (a namespace the API server refuses, one a Tenant
names that does not exist in this region, say, is logged and raised after the others are
written). Every step is idempotent; a reconcile that fails half-way is simply run again.

kopf watches Tenants, InferenceServices and the controller's ResourceQuotas only to wake the
kit's coalescing loop (`radixfleet.kit.loop`), which also runs every `RESYNC_SECONDS`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import kopf

from radixfleet import labels
from radixfleet.controllers.quota.decide import Plan, SetQuota, decide
from radixfleet.controllers.quota.metrics import GpuMetrics
from radixfleet.controllers.quota.observe import observe
from radixfleet.controllers.quota.ports import InferenceServices, ResourceQuotas, Secrets, Tenants
from radixfleet.controllers.quota.spec import API_VERSION, PLURAL, QUOTA_NAME
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import INFERENCE_SERVICES, Resource
from radixfleet.kit.loop import Loop, register_loop
from radixfleet.kit.plugin import OperatorOptions

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
NAME = "quota"
TENANTS = Resource(labels.GROUP, API_VERSION, PLURAL, namespaced=False)


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
        failed = [error for quota in plan.quotas if (error := self._set(quota)) is not None]
        if self.metrics is not None:
            self.metrics.update(plan.accounts)
        if failed:  # after the others: one namespace radixfleet may not write holds back no other
            raise failed[0]

    def _set(self, quota: SetQuota) -> KubeError | None:
        """Write one namespace's cap; the error, if the API server refused it."""
        try:
            self.quotas.set_hard(quota.namespace, tenant=quota.tenant, gpus=quota.hard)
        except KubeError as error:
            log.warning("ResourceQuota %s/%s not written: %s", quota.namespace, QUOTA_NAME, error)
            return error
        log.info("ResourceQuota %s/%s: %d GPUs", quota.namespace, QUOTA_NAME, quota.hard)
        return None


# ---- kopf ----------------------------------------------------------------------------------


def register(registry: kopf.OperatorRegistry, controller: Controller) -> Loop:
    """Add the quota's handlers to `registry`; nothing is registered on import.

    kopf's own bookkeeping stays in annotations (the operator's settings), never in status:
    the status is the admission policy's input."""
    loop = Loop(NAME, lambda now: _passes(controller.reconcile(now=now)),
                resync_seconds=RESYNC_SECONDS)  # fmt: skip
    quotas = Resource("", "v1", "resourcequotas")
    register_loop(registry, loop, watch=[TENANTS, INFERENCE_SERVICES, quotas],
                  watch_labels={"resourcequotas": {labels.MANAGED_BY: labels.MANAGER}})  # fmt: skip
    return loop


def _passes(plan: Plan) -> list[str]:
    """The plan's writes as verbs, for the decision counter."""
    return ["status"] * len(plan.statuses) + ["quota"] * len(plan.quotas)


def kube_controller(options: OperatorOptions | None = None) -> Controller:
    """A Controller on the in-cluster (or kubeconfig) credentials."""
    from radixfleet.controllers.quota.kube import KubeResourceQuotas, KubeSecrets, KubeTenants
    from radixfleet.kit.kube import KubeInferenceServices, api_client

    options = options or OperatorOptions()
    api = api_client()
    return Controller(
        tenants=KubeTenants(api),
        isvcs=KubeInferenceServices(api),
        quotas=KubeResourceQuotas(api),
        secrets=KubeSecrets(api),
        metrics=GpuMetrics(region=options.region),
    )
