"""RBAC rules as data: the union keeps exactly the permissions it was given."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.kit.rbac import (
    CLUSTER,
    TENANT_NAMESPACES,
    PolicyRule,
    cluster_role,
    covers,
    rule,
    union,
)

names = st.sampled_from(["", "apps", "radixfleet.io", "kopf.dev"])
resources = st.sampled_from(["pods", "secrets", "tenants", "tenants/status", "configmaps"])
verbs = st.sampled_from(["get", "list", "watch", "create", "update", "patch"])
rules = st.builds(
    PolicyRule,
    api_groups=st.lists(names, min_size=1, max_size=2, unique=True).map(tuple),
    resources=st.lists(resources, min_size=1, max_size=3, unique=True).map(tuple),
    verbs=st.lists(verbs, min_size=1, max_size=4, unique=True).map(tuple),
    scope=st.sampled_from([CLUSTER, TENANT_NAMESPACES]),
)


@settings(deadline=None)  # a busy machine, not the union, is what runs past 200 ms
@given(st.lists(rules, max_size=8))
def test_the_union_grants_exactly_what_its_parts_grant(parts: list[PolicyRule]) -> None:
    merged = union(parts)
    for scope in (CLUSTER, TENANT_NAMESPACES):  # nor moves a permission from where it is granted
        given_triples = {t for p in parts if p.scope == scope for t in p.triples()}
        merged_triples = {t for r in merged if r.scope == scope for t in r.triples()}
        assert merged_triples == given_triples
    assert union(merged) == merged  # merging twice changes nothing
    assert union(reversed(parts)) == merged  # nor does the order of the parts


def test_covers_and_the_manifest() -> None:
    rules = [
        rule("", ("pods", "configmaps"), "get"),
        rule("kopf.dev", "clusterkopfpeerings", "patch"),
        rule("", "secrets", "get", scope=TENANT_NAMESPACES),
    ]
    assert covers(rules, "", "configmaps", "get")
    assert not covers(rules, "", "configmaps", "list")
    role = cluster_role("r", rules, labels={"a": "b"})
    assert role["kind"] == "ClusterRole"
    assert not [r for r in role["rules"] if "secrets" in r["resources"]]  # not cluster-wide
    assert {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get"]} in role[
        "rules"
    ]
