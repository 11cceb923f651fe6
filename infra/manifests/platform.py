"""radixfleet itself in a region: the operator's and the entry's RBAC, Deployments and Services
(from radixfleet/render/, the same as deploy/), their CRDs, namespace and network policies, the
admission policies, and which fields `pulumi up` leaves to the controllers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from infra.manifests.base import Manifest
from infra.manifests.nodes import SYSTEM_NODE_LABELS
from radixfleet.kit.rbac import CLUSTER, scoped
from radixfleet.render import data_plane_guard, entry, monitoring, operator

CONTROLLERS = operator.NAME
ENTRY = entry.NAME
CONTROLLERS_NAMESPACE = operator.NAMESPACE
FLEET_TOKEN_SECRET = operator.FLEET_TOKEN_SECRET
FLEET_TOKEN_KEY = operator.FLEET_TOKEN_KEY

# Fields of what this program declares that a controller owns once it exists: `pulumi up`
# ignores their later changes (the way the failover owns the record weights), so it never
# resets a rollout in progress. The canary steps `canaryTrafficPercent` from the rendered 0.
OWNED_BY_CONTROLLERS: dict[str, list[str]] = {
    "InferenceService": ["spec.predictor.canaryTrafficPercent"],
}


def owned_by_controllers(manifest: Manifest) -> list[str]:
    """The fields of `manifest` that `pulumi up` leaves to radixfleet's controllers."""
    return list(OWNED_BY_CONTROLLERS.get(str(manifest.get("kind")), []))


# What `pulumi up` waits for on a created object before it counts as ready (pulumi-kubernetes'
# `pulumi.com/waitFor`, the syntax of `kubectl wait --for`). A Tenant: the quota controller's
# first accounting, since until then the GPU-budget admission policy refuses the tenant's
# models ("retry shortly") and pulumi-kubernetes does not retry a refusal.
AWAITED: dict[str, str] = {"Tenant": "jsonpath={.status.observedGeneration}"}
WAIT_FOR = "pulumi.com/waitFor"


def awaited(manifest: Manifest) -> Manifest:
    """`manifest` as `pulumi up` creates it: with what to wait for, if its kind has anything."""
    condition = AWAITED.get(str(manifest.get("kind")))
    if condition is None:
        return manifest
    metadata = manifest["metadata"]
    annotations = {**metadata.get("annotations", {}), WAIT_FOR: condition}
    return {**manifest, "metadata": {**metadata, "annotations": annotations}}


def load_crds(directory: Path) -> list[Manifest]:
    """The radixfleet CustomResourceDefinitions shipped in `directory` (none is fine)."""
    if not directory.is_dir():
        return []
    return [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def controller_cluster_rules() -> list[Manifest]:
    """The operator's ClusterRole rules: exactly what the registered controllers' adapters
    declare plus what kopf needs, derived in one place (radixfleet/render/operator.py) for both
    this program and the kustomize base deploy/operator/.
    """
    return [r.to_manifest() for r in scoped(operator.operator_rules(), CLUSTER)]


def controller_deployment(
    *,
    image: str,
    replicas: int,
    region: str,
    router_image: str,
    with_failover: bool = False,
    node_selector: Mapping[str, str] = SYSTEM_NODE_LABELS,
) -> Manifest:
    """The operator's Deployment (`radixfleet operator run`), on the system nodes (by default
    the label infra's system node group carries): non-root, read-only, AWS access only via pod
    identity; its routers controller runs `router_image`; in one region of the fleet it also
    runs the failover."""
    args = ["--region", region, *(["--with-failover"] if with_failover else [])]
    return operator.deployment(
        image=image, replicas=replicas, args=args, env={"AWS_REGION": region},
        node_selector=dict(node_selector) or None, router_image=router_image,
    )  # fmt: skip


def entry_cluster_rules() -> list[Manifest]:
    """The region entry's ClusterRole rules (radixfleet/render/entry.py, as deploy/entry/)."""
    return [r.to_manifest() for r in scoped(entry.entry_rules(), CLUSTER)]


def entry_ledger() -> list[Manifest]:
    """The ConfigMap the entry's replicas keep their debts in, and the Role and RoleBinding that
    let the entry get and patch that one ConfigMap (radixfleet/render/entry.py)."""
    return [entry.ledger(), entry.platform_role(), entry.platform_role_binding()]


def entry_deployment(
    *, image: str, replicas: int, region: str, node_selector: Mapping[str, str] = SYSTEM_NODE_LABELS
) -> Manifest:
    """The region entry's Deployment, on the system nodes (as deploy/entry/)."""
    return entry.deployment(image=image, replicas=replicas, region=region,
                            node_selector=dict(node_selector) or None)  # fmt: skip


def entry_disruption_budget() -> Manifest:
    return entry.disruption_budget()


def entry_service() -> Manifest:
    """The entry's ClusterIP Service, which the operator's pre-warmer calls (as deploy/entry/)."""
    return entry.service()


def pod_monitors() -> list[Manifest]:
    """What the region's Prometheus scrapes: SGLang predictors and the operator, labelled as the
    controllers and dashboards query (radixfleet/render/monitoring.py, as deploy/monitoring/)."""
    return monitoring.pod_monitors()


def peering() -> Manifest:
    """The ClusterKopfPeering the operator's replicas elect their leader in."""
    return operator.peering()


def platform_namespace() -> Manifest:
    """radixfleet's namespace, enforcing Pod Security `restricted` (as deploy/operator/)."""
    return operator.namespace()


def platform_network_policies() -> list[Manifest]:
    """Who may reach the pods of radixfleet's namespace: clients the entry's HTTP port,
    Prometheus the metrics ports, nobody anything else (as deploy/operator/ and deploy/entry/)."""
    return [*operator.network_policies(), entry.network_policy()]


def admission_policies() -> list[Manifest]:
    """The policies that keep the data plane's key and labels on its own pods in every tenant
    namespace (radixfleet/render/data_plane_guard.py) and the operator's controllers' (the
    quota's GPU budgets), and their bindings: deploy/operator/ and inferenceservices/ hold the
    same."""
    return [*data_plane_guard.manifests(), *operator.admission_policies()]
