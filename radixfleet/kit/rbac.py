"""RBAC rules as data: what each Kubernetes adapter declares it calls, and their union.

Every `*/kube.py` declares `RULES`, the PolicyRules its methods need, next to the code that makes
the calls (a test records every call on a fake client and checks it is covered). The operator's
ClusterRole is `union()` over the registered controllers' rules and `KOPF_RULES`, rendered once
by `cluster_role()` for both the kustomize base and the Pulumi program.

A rule's scope says where it is granted. Reads are mostly cluster-wide (the ClusterRole), and
so are writes to radixfleet's own kinds. Writes to the serving objects are not: the operator
creates and patches the routers' Deployments and Services, patches pods' pool labels, a
revision's scale bounds (on it and its PodAutoscaler) and an InferenceService's canary traffic,
only in tenant namespaces (a leaked token of the operator's cannot touch `kube-system`). Nor are
Secrets: no radixfleet account may read or create one outside a tenant namespace, and inside
one it may read only those it is told of (the data plane's key, the tenant's API keys). Those
rules are `TENANT_NAMESPACES` rules, rendered by `namespace_role()` as a Role in each tenant
namespace, whose verbs name their objects (`resourceNames`) unless the rule says they cannot
(`by_name` False: a router's Deployment is named for a revision no Role can list ahead);
`radixfleet/render/tenant_access.py` renders them with the tenant. `OWN_NAMESPACE` rules are
granted the same way in radixfleet's own namespace (the entry's ledger ConfigMap, by name).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

READ = ("get", "list", "watch")
# What kopf calls on a resource one of its timers serves: it watches every object, and adds and
# removes its finalizer (a merge patch) so a timer stops before its object is gone.
KOPF_TIMER = (*READ, "patch")

# Verb order as `kubectl describe clusterrole` reads best: reads first, then writes.
_VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete")
# Where a rule is granted: everywhere (the ClusterRole), in each tenant namespace only, or in
# radixfleet's own namespace only (both as Roles whose verbs name their objects).
CLUSTER = "cluster"
TENANT_NAMESPACES = "tenant-namespaces"
OWN_NAMESPACE = "own-namespace"
# The verbs RBAC cannot hold to named objects: a create's object has no name to check yet.
_UNNAMEABLE = frozenset({"create", "deletecollection"})


@dataclass(frozen=True)
class PolicyRule:
    """One rule of a Role: every verb on every resource of every API group listed."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    scope: str = CLUSTER
    # In a namespace's Role: whether the verbs are held to the objects the Role names, or reach
    # every object of the kind there.
    by_name: bool = True

    def triples(self) -> set[tuple[str, str, str]]:
        """(group, resource, verb) for every combination the rule allows."""
        return {(g, r, v) for g in self.api_groups for r in self.resources for v in self.verbs}

    def to_manifest(self, resource_names: tuple[str, ...] = ()) -> dict[str, Any]:
        """The rule as a Role's `rules` entry (for those objects only, if named)."""
        manifest: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if resource_names:
            manifest["resourceNames"] = list(resource_names)
        return manifest


def rule(
    group: str,
    resources: str | tuple[str, ...],
    *verbs: str,
    scope: str = CLUSTER,
    by_name: bool = True,
) -> PolicyRule:
    """A PolicyRule in one line: `rule("", "pods", "list", "patch")`."""
    names = (resources,) if isinstance(resources, str) else resources
    return PolicyRule(
        api_groups=(group,), resources=names, verbs=verbs, scope=scope, by_name=by_name
    )


# What kopf itself calls, whatever the handlers do: it discovers resources through the CRDs,
# watches namespaces for `--namespace` patterns, posts Events about the objects it handles, and
# keeps peering (leader election) in ClusterKopfPeering objects' status.
KOPF_RULES: tuple[PolicyRule, ...] = (
    rule("apiextensions.k8s.io", "customresourcedefinitions", "list", "watch"),
    rule("", "namespaces", "list", "watch"),
    rule("", "events", "create"),
    rule("kopf.dev", "clusterkopfpeerings", "get", "list", "watch", "patch"),
)


def covers(rules: Iterable[PolicyRule], group: str, resource: str, verb: str) -> bool:
    """Whether `rules` allow `verb` on `group`/`resource`."""
    return any((group, resource, verb) in r.triples() for r in rules)


def union(rules: Iterable[PolicyRule]) -> tuple[PolicyRule, ...]:
    """The same permissions in the fewest rules: one per scope, naming, group and verb set,
    sorted."""
    verbs: dict[tuple[str, bool, str, str], set[str]] = defaultdict(set)
    for granted in rules:
        for group, resource, verb in granted.triples():
            verbs[(granted.scope, granted.by_name, group, resource)].add(verb)
    grouped: dict[tuple[str, bool, str, tuple[str, ...]], list[str]] = defaultdict(list)
    for (scope, by_name, group, resource), allowed in sorted(verbs.items()):
        grouped[(scope, by_name, group, _ordered(allowed))].append(resource)
    return tuple(
        PolicyRule(api_groups=(group,), resources=tuple(resources), verbs=verb_list, scope=scope,
                   by_name=by_name)
        for (scope, by_name, group, verb_list), resources in sorted(
            grouped.items(), key=lambda kv: (kv[0][0], not kv[0][1], kv[0][2], kv[1])
        )
    )  # fmt: skip


def scoped(rules: Iterable[PolicyRule], scope: str) -> tuple[PolicyRule, ...]:
    """The rules granted in `scope`, merged."""
    return union(r for r in rules if r.scope == scope)


def _ordered(verbs: set[str]) -> tuple[str, ...]:
    known = [v for v in _VERB_ORDER if v in verbs]
    return (*known, *sorted(verbs - set(_VERB_ORDER)))


def cluster_role(
    name: str, rules: Iterable[PolicyRule], *, labels: dict[str, str]
) -> dict[str, Any]:
    """A ClusterRole manifest with the cluster-wide ones of `rules`, merged."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(labels)},
        "rules": [r.to_manifest() for r in scoped(rules, CLUSTER)],
    }


def namespace_role(
    name: str,
    namespace: str,
    rules: Iterable[PolicyRule],
    *,
    names: Iterable[str],
    labels: dict[str, str],
    scope: str = TENANT_NAMESPACES,
) -> dict[str, Any]:
    """A Role in `namespace` with the ones of `rules` granted in `scope`; each verb of a rule
    `by_name` is held to the objects `names` lists, but a create (its object has no name to
    check yet)."""
    named, entries = tuple(sorted(set(names))), []
    for granted in scoped(rules, scope):
        if not granted.by_name:
            entries.append(granted.to_manifest())
            continue
        by_name = tuple(v for v in granted.verbs if v not in _UNNAMEABLE)
        others = tuple(v for v in granted.verbs if v in _UNNAMEABLE)
        for verbs, only in ((by_name, named), (others, ())):
            if verbs:
                part = PolicyRule(granted.api_groups, granted.resources, verbs, granted.scope)
                entries.append(part.to_manifest(only))
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "rules": entries,
    }


def role_binding(
    name: str, namespace: str, *, account_namespace: str, labels: dict[str, str]
) -> dict[str, Any]:
    """The RoleBinding in `namespace` of Role `name` to the ServiceAccount `name` of
    `account_namespace`."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": account_namespace}],
    }


def cluster_role_binding(name: str, *, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The ClusterRoleBinding of ClusterRole `name` to the ServiceAccount `name` in `namespace`."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
