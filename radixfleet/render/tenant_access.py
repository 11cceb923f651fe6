"""What radixfleet's own accounts may do inside one tenant namespace, and only there: its Secrets
and its workloads.

The operator and the region entry hold no right to Secrets in their ClusterRoles, and the
operator none to write Deployments, Services or pods. In each tenant namespace a Role per account
grants what their adapters declare for tenant namespaces (`TENANT_NAMESPACES` rules in
`*/kube.py`): the operator reads the data plane's key and the tenant's API keys and creates the
data plane's key (routers, autoscale, quota), creates and patches the routers' Deployments and
Services, patches pods' pool labels (autoscale, canary), revisions' and PodAutoscalers' scale
bounds (autoscale) and InferenceServices' canary traffic (canary); the entry reads the same
keys. Every Secret read names its Secrets, so neither account can read any other Secret, a
tenant's own workloads' included, and neither can create one, nor a Deployment, outside a
tenant namespace.

Rendered with the tenant: by `radixfleet render` (inferenceservices/secret-access.yaml) and by
the Pulumi program for each region's namespaces. A Tenant whose `apiKeys` name a Secret not
listed here (added by hand, not through the catalog) is reported as ApiKeysResolved=False by the
quota controller until its namespace's access is rendered again with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from radixfleet import dataplane, labels
from radixfleet.config.catalog import Tenant
from radixfleet.config.serving import api_keys_secret, namespace_of
from radixfleet.kit.rbac import namespace_role, role_binding
from radixfleet.render import entry, operator

Manifest = dict[str, Any]

ACCESS_LABELS = {labels.MANAGED_BY: labels.MANAGER}


def secret_access(tenants: Iterable[Tenant]) -> list[Manifest]:
    """`tenant_access` of each namespace where `tenants` (those served there: a catalog's, a
    region's) run models, naming their API-key Secrets; sorted by namespace."""
    keys: dict[str, set[str]] = {}
    for tenant in tenants:
        keys.setdefault(namespace_of(tenant), set()).add(api_keys_secret(tenant))
    return [obj for ns, names in sorted(keys.items()) for obj in tenant_access(ns, names)]


def tenant_access(namespace: str, api_key_secrets: Iterable[str]) -> list[Manifest]:
    """The operator's and the entry's Role and RoleBinding in `namespace`, their reads held to
    the data plane's key and `api_key_secrets` (the names of the tenant's key Secrets there)."""
    names = [dataplane.SECRET, *api_key_secrets]
    accounts = ((operator.NAME, operator.operator_rules()), (entry.NAME, entry.entry_rules()))
    return [
        obj
        for account, rules in accounts
        for obj in (
            namespace_role(account, namespace, rules, names=names, labels=ACCESS_LABELS),
            role_binding(
                account, namespace, account_namespace=operator.NAMESPACE, labels=ACCESS_LABELS
            ),
        )
    ]
