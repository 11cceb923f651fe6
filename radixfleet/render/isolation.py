"""How a namespace of the platform's is closed: its Pod Security levels and its NetworkPolicies.

Tenant namespaces (radixfleet/render/inferenceservices.py) and radixfleet's own
(`render/operator.py`, `render/entry.py`) are built from these, so both read the same way: Pod
Security labels pinned to the Kubernetes minor the platform targets (an upgrade cannot loosen them),
and policies that name who may open a connection to which pods, on which ports, with everything else
refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from radixfleet import labels
from radixfleet.platform import KUBERNETES_VERSION

Manifest = dict[str, Any]


def pod_security_labels(levels: Mapping[str, str] = labels.POD_SECURITY_LEVELS) -> dict[str, str]:
    """Pod Security admission's labels for `levels` (mode -> level), pinned to the platform's
    Kubernetes minor."""
    version = f"v{KUBERNETES_VERSION}"
    out = {}
    for mode, level in levels.items():
        out[f"pod-security.kubernetes.io/{mode}"] = level
        out[f"pod-security.kubernetes.io/{mode}-version"] = version
    return out


def network_policy(
    namespace: str, name: str, pods: Mapping[str, Any], ingress: list[Manifest]
) -> Manifest:
    """A NetworkPolicy admitting `ingress` to the `pods` (a label selector; {} for all)."""
    spec: Manifest = {"podSelector": dict(pods), "policyTypes": ["Ingress"]}
    if ingress:  # none at all: the API server stores no empty list, and the diff stays clean
        spec["ingress"] = ingress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": spec,
    }  # fmt: skip


def deny_ingress(namespace: str) -> Manifest:
    """The policy that selects every pod of `namespace` and admits nothing: only what another
    policy admits gets in."""
    return network_policy(namespace, "radixfleet-deny-ingress", {}, [])


def from_namespace(name: str) -> Manifest:
    """A policy peer: every pod of the namespace `name`."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}
