"""The rendered manifests against a real API server: KServe's and Knative's own CRD schemas,
server-side apply, pruning and strict field validation, as a cluster would apply them.

Every custom resource that `kubectl kustomize runtimes/` and `kubectl kustomize
inferenceservices/` produce must pass `kubectl apply --server-side --dry-run=server`, must be
created for real, and must read back with every rendered field intact (a field the schema does
not know would be pruned silently by a plain create). Built-in objects (the tenants' Namespaces)
are left out: the apiextensions server serves custom resources only, and namespaced custom
resources are accepted without their Namespace object existing there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.apiserver.fixture import FIELD_MANAGER, ApiServer, ServedKind

REPO = Path(__file__).resolve().parent.parent
RENDERED = ("runtimes", "inferenceservices")
# API groups of Kubernetes itself; objects in them are for a full cluster, not this server.
BUILTIN_GROUPS = frozenset(
    {"", "apps", "batch", "policy", "autoscaling", "rbac.authorization.k8s.io",
     "networking.k8s.io", "coordination.k8s.io", "scheduling.k8s.io", "storage.k8s.io"}
)  # fmt: skip

pytestmark = pytest.mark.apiserver


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _rendered(folder: str, server: ApiServer) -> list[dict[str, Any]]:
    if not (REPO / folder / "kustomization.yaml").is_file():
        pytest.skip(f"{folder}/ has no kustomization.yaml yet: nothing rendered to test")
    out = server.kubectl("kustomize", str(REPO / folder)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _custom_resources(folder: str, server: ApiServer) -> list[dict[str, Any]]:
    """The folder's custom resources; fails on an object no CRD serves that is not built-in."""
    docs = _rendered(folder, server)
    resources = [d for d in docs if _group(d["apiVersion"]) not in BUILTIN_GROUPS]
    unknown = [f"{d['apiVersion']} {d['kind']}" for d in resources if _kind(server, d) is None]
    assert not unknown, f"no installed CRD serves: {unknown}"
    assert resources, f"{folder}/ renders no custom resources"
    return resources


def _kind(server: ApiServer, doc: dict[str, Any]) -> ServedKind | None:
    return server.kinds.get((doc["apiVersion"], doc["kind"]))


def _read_back(server: ApiServer, doc: dict[str, Any]) -> dict[str, Any]:
    kind = _kind(server, doc)
    assert kind is not None
    api = client.CustomObjectsApi(server.api_client)
    group, _, version = doc["apiVersion"].rpartition("/")
    name = doc["metadata"]["name"]
    if kind.namespaced:
        namespace = doc["metadata"].get("namespace", "default")
        got = api.get_namespaced_custom_object(group, version, namespace, kind.plural, name)
    else:
        got = api.get_cluster_custom_object(group, version, kind.plural, name)
    assert isinstance(got, dict)
    return got


def _missing(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Paths where ``actual`` lacks or changes what ``expected`` has (extra fields are fine)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [path or "."]
        return [p for k, v in expected.items() for p in _missing(v, actual.get(k), f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [path]
        return [
            p
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for p in _missing(e, a, f"{path}[{i}]")
        ]
    return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]


def _apply(
    server: ApiServer, docs: list[dict[str, Any]], *extra: str
) -> subprocess.CompletedProcess[str]:
    return server.kubectl(
        "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", *extra, "-f", "-",
        stdin=yaml.safe_dump_all(docs), check=False,
    )  # fmt: skip


@pytest.mark.parametrize("folder", RENDERED)
def test_rendered_resources_pass_server_side_dry_run(apiserver: ApiServer, folder: str) -> None:
    docs = _custom_resources(folder, apiserver)
    result = _apply(apiserver, docs, "--dry-run=server")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("serverside-applied (server dry run)") == len(docs), result.stdout


@pytest.mark.parametrize("folder", RENDERED)
def test_rendered_resources_are_created_intact(apiserver: ApiServer, folder: str) -> None:
    docs = _custom_resources(folder, apiserver)
    # A plain create, as `kubectl create` or a controller does; Strict so an unknown field
    # fails here instead of being pruned.
    result = apiserver.kubectl(
        "create", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(docs), check=False
    )
    assert result.returncode == 0, result.stderr
    for doc in docs:
        stored = _read_back(apiserver, doc)
        changed = _missing(doc.get("spec"), stored.get("spec"), "spec")
        assert not changed, f"{doc['kind']} {doc['metadata']['name']}: {changed}"
