"""The cluster's DNS: CoreDNS (built here, testbed/coredns) as kubeadm installs it, as objects.

Names under ``cluster.local`` are answered from the API (the ``kubernetes`` plugin); nothing
is forwarded upstream, since nothing outside this machine can be reached from the cluster.
"""

from __future__ import annotations

from typing import Any

from testbed.layout import CLUSTER_DOMAIN, Network

NAMESPACE = "kube-system"
NAME = "coredns"
LABELS = {"k8s-app": "kube-dns"}

# Port 1053 in the pod, 53 on the Service: a non-root process binds no port below 1024.
COREFILE = f""".:1053 {{
    errors
    health {{
        lameduck 2s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus :9153
    cache 30
    loop
    reload
    loadbalance
}}
"""


def objects(network: Network, *, image: str) -> list[dict[str, Any]]:
    """Everything CoreDNS needs, in apply order."""
    meta = {"name": NAME, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        _cluster_role(),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"system:{NAME}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"system:{NAME}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        _deployment(image),
        _service(network),
    ]


def _cluster_role() -> dict[str, Any]:
    # What the kubernetes plugin watches; read-only, as upstream's deployment grants.
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"system:{NAME}"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["endpoints", "services", "pods", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }


def _deployment(image: str) -> dict[str, Any]:
    container = {
        "name": NAME,
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"containerPort": 1053, "protocol": "UDP", "name": "dns"},
            {"containerPort": 1053, "protocol": "TCP", "name": "dns-tcp"},
            {"containerPort": 9153, "protocol": "TCP", "name": "metrics"},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": 8080},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "50Mi"}, "limits": {"memory": "170Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod = {
        "serviceAccountName": NAME,
        "dnsPolicy": "Default",
        "priorityClassName": "system-cluster-critical",
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": NAME}}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": LABELS},
            "template": {"metadata": {"labels": LABELS}, "spec": pod},
        },
    }


def _service(network: Network) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": LABELS},
        "spec": {
            "selector": LABELS,
            "clusterIP": network.dns_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 1053},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 1053},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
        },
    }
