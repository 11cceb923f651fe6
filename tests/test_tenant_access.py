"""Secrets, least privilege: the operator and the entry hold no right to a Secret cluster-wide;
in each tenant namespace a Role lets them read only the Secrets it names (the data plane's key,
the tenant's API keys), and only the operator create one (the data plane's key). Rendered the
same by `radixfleet render` (inferenceservices/secret-access.yaml) and the Pulumi program.

The API server's own answers for these Roles: tests/cluster/test_controller_rbac.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import manifests as m
from radixfleet import dataplane
from radixfleet.config import load_catalog
from radixfleet.config.serving import api_keys_secret, namespace_of, served_tenants
from radixfleet.kit.rbac import CLUSTER, TENANT_NAMESPACES, namespace_role, rule
from radixfleet.platform import PLATFORM_NAMESPACE
from radixfleet.render import entry, operator
from radixfleet.render.tenant_access import tenant_access

REPO = Path(__file__).resolve().parent.parent
CATALOG = load_catalog(REPO / "inferenceservices" / "catalog.yaml")
RENDERED = REPO / "inferenceservices" / "secret-access.yaml"


def _secret_grants(role: dict[str, Any]) -> set[tuple[str, tuple[str, ...]]]:
    """(verb, the names it is held to) for every Secret verb of a Role."""
    return {
        (verb, tuple(r.get("resourceNames", ())))
        for r in role["rules"]
        if "secrets" in r["resources"]
        for verb in r["verbs"]
    }


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == kind
    }


def test_a_nameable_verb_is_held_to_the_names_and_a_create_cannot_be() -> None:
    rules = [
        rule("", "secrets", "get", "create", scope=TENANT_NAMESPACES),
        rule("", "pods", "list", scope=CLUSTER),  # not the Role's: the ClusterRole's
    ]
    role = namespace_role("r", "team-a", rules, names=["b", "a", "a"], labels={})
    assert role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
         "resourceNames": ["a", "b"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("account", "expected"),
    [
        pytest.param(operator.NAME, {"get", "create"}, id="operator"),
        pytest.param(entry.NAME, {"get"}, id="entry"),
    ],
)
def test_each_account_reads_only_the_named_secrets_of_a_tenant_namespace(
    account: str, expected: set[str]
) -> None:
    objects = tenant_access("team-a", ["a-keys", "a-keys-2027"])
    role = _by_kind(objects, "Role")[("team-a", account)]
    names = ("a-keys", "a-keys-2027", dataplane.SECRET)
    grants = _secret_grants(role)
    assert {verb for verb, _ in grants} == expected
    assert all(held == tuple(sorted(names)) for verb, held in grants if verb != "create")
    binding = _by_kind(objects, "RoleBinding")[("team-a", account)]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": account}  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": PLATFORM_NAMESPACE}
    ]


def test_render_grants_each_serving_namespace_its_tenants_keys_and_no_other() -> None:
    rendered = [d for d in yaml.safe_load_all(RENDERED.read_text()) if d]
    roles = _by_kind(rendered, "Role")
    served = {
        namespace_of(t): api_keys_secret(t)
        for model in CATALOG.models
        for t in served_tenants(CATALOG, model)
    }
    assert {ns for ns, _ in roles} == set(served)
    for (namespace, _), role in roles.items():
        reads = {held for verb, held in _secret_grants(role) if verb == "get"}
        assert reads == {tuple(sorted([served[namespace], dataplane.SECRET]))}, namespace


def test_pulumi_grants_what_render_grants_in_each_region() -> None:
    rendered = [d for d in yaml.safe_load_all(RENDERED.read_text()) if d]
    for region in CATALOG.regions:
        from_pulumi = m.region_secret_access(CATALOG, region)
        namespaces = {o["metadata"]["namespace"] for o in from_pulumi}
        assert namespaces  # every region of the catalog serves some model
        assert from_pulumi == [o for o in rendered if o["metadata"]["namespace"] in namespaces]


def test_no_cluster_role_of_ours_holds_a_secret() -> None:
    for rules in (m.controller_cluster_rules(), m.entry_cluster_rules()):
        assert not [r for r in rules if "secrets" in r["resources"]]


def test_no_cluster_role_of_ours_writes_workloads_and_the_operators_role_does_in_a_tenants() -> (
    None
):
    writes = {"create", "patch", "update", "delete"}
    for rules in (m.controller_cluster_rules(), m.entry_cluster_rules()):
        for granted in rules:
            if {"deployments", "services", "pods"} & set(granted["resources"]):
                assert not writes & set(granted["verbs"]), granted
    role = _by_kind(tenant_access("team-a", ["a-keys"]), "Role")[("team-a", operator.NAME)]
    unnamed = {(res, verb) for r in role["rules"] if "resourceNames" not in r
               for res in r["resources"] for verb in r["verbs"]}  # fmt: skip
    wanted = {("deployments", "create"), ("deployments", "patch"), ("services", "create"),
              ("services", "patch"), ("pods", "patch")}  # fmt: skip
    assert unnamed >= wanted
