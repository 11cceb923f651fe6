"""The entry's view of the cluster, re-read every few seconds, and the RBAC it needs.

Polling keeps the entry simple and its replicas independent: each lists the InferenceServices
(KServe's traffic status) and the CanaryPolicies (which rollouts run a baseline), asks the gate
to re-read the tenants, and reads the data plane's key of each namespace it routes to
(radixfleet.dataplane). A failed read keeps the last table (requests keep flowing on what was
known) and is retried at the next interval. Each pass is one list of InferenceServices, one of
CanaryPolicies, one of Tenants, one read per API-key Secret and one per namespace's data-plane
Secret; a fleet with many tenants would want watches instead (not built yet).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from kubernetes import client

from radixfleet import dataplane, labels
from radixfleet.dataplane.routes import baselines_of, build_routes
from radixfleet.entry.server import ClusterEntry
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import (
    INFERENCE_SERVICES,
    Resource,
    list_everywhere,
    read_secret_values,
)
from radixfleet.kit.rbac import TENANT_NAMESPACES, PolicyRule, rule

log = logging.getLogger(__name__)

# The canary controller's CRD (radixfleet/controllers/canary/spec.py; the kernel names it without
# importing it).
CANARY_POLICIES = Resource(labels.GROUP, "v1alpha1", "canarypolicies")

RULES: tuple[PolicyRule, ...] = (
    INFERENCE_SERVICES.rule("list"),
    CANARY_POLICIES.rule("list"),  # which rollouts run a baseline, from their status
    # Each namespace's data-plane key, by its one name.
    rule("", "secrets", "get", scope=TENANT_NAMESPACES),
)


class InferenceServices(Protocol):
    def everywhere(self) -> list[dict[str, Any]]: ...


class CanaryPolicies(Protocol):
    def everywhere(self) -> list[dict[str, Any]]: ...


class DataPlaneKeys(Protocol):
    def keys(self, namespace: str) -> dict[str, str]:
        """The namespace's data-plane keys by name (two during a rotation); {} while its
        Secret is missing."""
        ...


class KubeDataPlaneKeys:
    """The data plane's keys as the namespaces' Secrets hold them."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def keys(self, namespace: str) -> dict[str, str]:
        return read_secret_values(self.api_client, namespace, dataplane.SECRET)


class KubeCanaryPolicies:
    """Every CanaryPolicy in the cluster (list on `CANARY_POLICIES`)."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def everywhere(self) -> list[dict[str, Any]]:
        return list_everywhere(self.api, CANARY_POLICIES)


async def keep_in_sync(
    entry: ClusterEntry,
    isvcs: InferenceServices,
    keys: DataPlaneKeys,
    *,
    interval_s: float,
    policies: CanaryPolicies | None = None,
) -> None:
    """Refresh the entry's routes, keys and budgets every `interval_s`, until cancelled."""
    while True:
        try:
            namespaces = await asyncio.to_thread(entry.gate.sync)
            listed = await asyncio.to_thread(isvcs.everywhere)
            rollouts = await asyncio.to_thread(policies.everywhere) if policies else []
            routes = build_routes(namespaces, listed, baselines_of(rollouts))
            found = await asyncio.to_thread(_read_keys, keys, routes.namespaces())
            # Routes and keys change together: a tenant's new route never answers before the
            # entry holds its key.
            entry.routes, entry.keys = routes, found
            # Which key each revision took: only for revisions still routed to.
            routed = routes.revisions()
            entry.revision_keys = {
                pinned: name for pinned, name in entry.revision_keys.items() if pinned in routed
            }
            if entry.prefixes is not None:
                entry.prefixes.keep_only(routes.served())
        except KubeError as error:
            log.warning("cluster read failed (%s); serving on the last table", error)
        except Exception:  # no answer at all (the client's connection errors): the same
            log.exception("cluster read failed; serving on the last table")
        await asyncio.sleep(interval_s)


def _read_keys(keys: DataPlaneKeys, namespaces: set[str]) -> dict[str, dict[str, str]]:
    found = {namespace: keys.keys(namespace) for namespace in sorted(namespaces)}
    return {namespace: named for namespace, named in found.items() if named}
