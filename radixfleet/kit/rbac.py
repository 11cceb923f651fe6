"""RBAC rules as data: what each Kubernetes adapter declares it calls, and their union.

Every `*/kube.py` declares `RULES`, the PolicyRules its methods need, next to the code that makes
the calls (a test records every call on a fake client and checks it is covered). The operator's
ClusterRole is `union()` over the registered controllers' rules and `KOPF_RULES`, rendered once
by `cluster_role()` for both the kustomize base and the Pulumi program.
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


@dataclass(frozen=True)
class PolicyRule:
    """One rule of a Role: every verb on every resource of every API group listed."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    def triples(self) -> set[tuple[str, str, str]]:
        """(group, resource, verb) for every combination the rule allows."""
        return {(g, r, v) for g in self.api_groups for r in self.resources for v in self.verbs}

    def to_manifest(self) -> dict[str, Any]:
        """The rule as a Role's `rules` entry."""
        return {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }


def rule(group: str, resources: str | tuple[str, ...], *verbs: str) -> PolicyRule:
    """A PolicyRule in one line: `rule("", "pods", "list", "patch")`."""
    names = (resources,) if isinstance(resources, str) else resources
    return PolicyRule(api_groups=(group,), resources=names, verbs=verbs)


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
    """The same permissions in the fewest rules: one per group and verb set, sorted."""
    verbs: dict[tuple[str, str], set[str]] = defaultdict(set)
    for granted in rules:
        for group, resource, verb in granted.triples():
            verbs[(group, resource)].add(verb)
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = defaultdict(list)
    for (group, resource), allowed in sorted(verbs.items()):
        grouped[(group, _ordered(allowed))].append(resource)
    return tuple(
        PolicyRule(api_groups=(group,), resources=tuple(resources), verbs=verb_list)
        for (group, verb_list), resources in sorted(
            grouped.items(), key=lambda kv: (kv[0][0], kv[1])
        )
    )


def _ordered(verbs: set[str]) -> tuple[str, ...]:
    known = [v for v in _VERB_ORDER if v in verbs]
    return (*known, *sorted(verbs - set(_VERB_ORDER)))


def cluster_role(
    name: str, rules: Iterable[PolicyRule], *, labels: dict[str, str]
) -> dict[str, Any]:
    """A ClusterRole manifest with `union(rules)`."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(labels)},
        "rules": [r.to_manifest() for r in union(rules)],
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
