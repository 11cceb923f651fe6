"""The test cluster is a real one: a kubelet runs radixfleet's image on containerd and runc,
kube-proxy routes a Service to it, CoreDNS names it, and the API server streams exec and logs
from the kubelet. If any of these fails, every later cluster test would fail for a reason
that is not its own; these name the broken part first.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from infra.testing import example_config
from testbed import session
from testbed.builds import KUBE_VERSION
from testbed.cluster import Cluster
from testbed.layout import NODE_NAME

NAMESPACE = "node-check"
APP = "emulated-replica"


def _replica_objects(image: str) -> list[dict[str, Any]]:
    labels = {"app": APP}
    container = {
        "name": "replica",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": [
            "--model-path",
            "/mnt/models",
            "--served-model-name",
            "check",
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--enable-metrics",
        ],
        "env": [{"name": "RADIXFLEET_EMULATOR_WARM", "value": "1"}],
        "ports": [{"containerPort": 8080, "name": "http1"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 2},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": APP, "namespace": NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container],
                        "volumes": [{"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": APP, "namespace": NAMESPACE},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ]


@pytest.fixture(scope="module")
def replica(cluster: Cluster) -> str:
    """An emulated SGLang replica from radixfleet's image, behind a Service; its ClusterIP."""
    from testbed import images

    image = images.radixfleet()
    session.load_images(cluster, [image])
    session.apply(cluster, _replica_objects(image.pinned))
    session.wait_rollout(cluster, namespace=NAMESPACE, deployment=APP)
    service = json.loads(
        cluster.kubectl("get", "service", APP, "-n", NAMESPACE, "-o", "json").stdout
    )
    return str(service["spec"]["clusterIP"])


def test_the_node_runs_the_kubernetes_minor_infra_pins_for_eks_on_containerd(
    cluster: Cluster,
) -> None:
    node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
    info = node["status"]["nodeInfo"]
    pinned = example_config()["radixfleet:cluster"]["kubernetesVersion"]
    assert info["kubeletVersion"] == KUBE_VERSION
    assert info["kubeletVersion"].startswith(f"v{pinned}."), (info["kubeletVersion"], pinned)
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == str(session.GPUS_PER_NODE)


def test_a_service_routes_to_the_replica_through_kube_proxy(replica: str) -> None:
    # kube-proxy writes a new Service's rules on its own sync, not with the rollout: once, on a
    # busy machine after other namespaces' deletions, the first connection right after the
    # rollout timed out at 10 s. Routed within a minute is what this checks.
    session.wait_for(lambda: _health(replica) == 200, timeout_s=60,
                     what=f"the Service {replica} routed to the replica")  # fmt: skip
    with urllib.request.urlopen(f"http://{replica}/v1/models", timeout=10) as response:
        assert json.load(response)["data"][0]["id"] == "check"


def _health(address: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=5) as response:
            return int(response.status)
    except OSError:  # refused or timed out: not routed yet
        return None


def test_coredns_resolves_the_service_inside_a_pod(cluster: Cluster, replica: str) -> None:
    name = f"{APP}.{NAMESPACE}.svc.cluster.local"
    resolved = cluster.kubectl(
        "exec",
        "-n",
        NAMESPACE,
        f"deployment/{APP}",
        "--",
        "python3",
        "-c",
        f"import socket; print(socket.gethostbyname({name!r}))",
    )
    assert resolved.stdout.strip() == replica


def test_the_api_server_streams_the_pods_log_from_the_kubelet(
    cluster: Cluster, replica: str
) -> None:
    log = cluster.kubectl("logs", "-n", NAMESPACE, f"deployment/{APP}")
    assert "emulated sglang replica 'check'" in log.stdout


def test_the_api_server_records_who_deleted_what_and_never_a_secrets_value(
    cluster: Cluster,
) -> None:
    """The audit log (testbed/components.py) answers "who deleted this?" after a failure: each
    deletion with its user, object and time; a Secret's deletion without its data."""
    name, value = "audit-check", "never-logged-value-7f3a"
    cluster.kubectl("create", "secret", "generic", name, "-n", "default",
                    f"--from-literal=key={value}")  # fmt: skip
    cluster.kubectl("delete", "secret", name, "-n", "default")
    log = cluster.layout.logs / "audit.log"

    def recorded() -> list[dict[str, Any]]:
        events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return [e for e in events if (e.get("objectRef") or {}).get("name") == name]

    session.wait_for(lambda: bool(recorded()), timeout_s=30, what="the deletion in the audit log")
    (event,) = [e for e in recorded() if e["stage"] == "ResponseComplete"]
    assert event["verb"] == "delete" and event["objectRef"]["resource"] == "secrets", event
    assert event["objectRef"]["namespace"] == "default"
    assert event["user"]["username"], event["user"]
    assert event["responseStatus"]["code"] == 200, event
    assert value not in log.read_text()
