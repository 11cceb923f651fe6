"""core/v1 Events on the test cluster, read back as the API server stored them, and a client
the API server refuses (a ServiceAccount with no role): what the Events adapters meet for real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config

from testbed.cluster import Cluster


def clean_namespace(cluster: Cluster, kube_client: Any, namespace: str) -> None:
    """`namespace` exists and holds no Events (fixed names in the fakes: made if missing)."""
    if cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", namespace)
    client.CoreV1Api(kube_client).delete_collection_namespaced_event(namespace)


def stored(kube_client: Any, namespace: str, *, component: str) -> list[dict[str, Any]]:
    """The Events of `namespace` from `component`, in the order the API server stored them."""
    listed = client.CoreV1Api(kube_client).list_namespaced_event(
        namespace, field_selector=f"source={component}"
    )
    events: list[dict[str, Any]] = kube_client.sanitize_for_serialization(listed)["items"]
    return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))


def refused_client(cluster: Cluster, namespace: str, folder: Path) -> Any:
    """A client authenticated as a ServiceAccount bound to no role: RBAC forbids it everything."""
    cluster.kubectl("create", "serviceaccount", "nobody", "-n", namespace, check=False)
    token = cluster.kubectl("create", "token", "nobody", "-n", namespace, "--duration=1h").stdout
    kubeconfig = cluster.token_kubeconfig(token.strip(), folder / "nobody.kubeconfig")
    return config.new_client_from_config(str(kubeconfig))
