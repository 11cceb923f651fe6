"""NetworkPolicies enforced in the test cluster: Kubernetes SIG Network's kube-network-policies
(v0.8.0, built here: testbed/builds.py says why with one edit) as the DaemonSet its own
install.yaml describes, in the node's network namespace.

The test bed's bridge CNI enforces no NetworkPolicy; while :func:`enforcing` runs, every new
connection to or from a pod that a NetworkPolicy selects is judged by the enforcer in user
space (nftables hands it over through a queue), with upstream's rules: the node's own root
traffic (the kubelet's probes) is let through, the rest is judged against the policies.

It runs fail-open here (a packet passes when no enforcer reads the queue): pod IPs are reused,
so a rule left behind by a test that died must never drop a later test's traffic. Teardown still
proves the rules are gone.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from typing import Any

from testbed import images, session
from testbed.builds import NETPOL
from testbed.cluster import Cluster, ClusterError
from testbed.gobuild import ensure_built

Manifest = dict[str, Any]

NAME = "kube-network-policies"
NAMESPACE = "kube-system"
TABLE = ("inet", "kube-network-policies")
QUEUE_ID = 98
READY_TIMEOUT_S = 120.0


def image() -> images.ImageRecord:
    binary = ensure_built(NETPOL) / NAME
    return images.go_binary_image(NAME, binary, entrypoint=[f"/usr/local/bin/{NAME}"])


def objects(image_ref: str) -> list[Manifest]:
    """ServiceAccount, read-only RBAC (pods, namespaces, NetworkPolicies) and the DaemonSet."""
    meta = {"name": NAME, "namespace": NAMESPACE}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NAME}, "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces"],
                 "verbs": ["list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                 "verbs": ["list", "watch"]}]}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": NAME},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": NAME},
               "subjects": [{"kind": "ServiceAccount", **meta}]}  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        role,
        binding,
        _daemon_set(image_ref),
    ]


def _daemon_set(image_ref: str) -> Manifest:
    labels = {"app": NAME}
    container = {
        "name": NAME,
        "image": image_ref,
        "imagePullPolicy": "Never",
        "args": [
            "--hostname-override=$(NODE_NAME)",
            f"--nfqueue-id={QUEUE_ID}",
            "--fail-open",
            # No NRI socket in the test bed's containerd: pod IPs come from the API server.
            "--disable-nri",
            # The DNS race it works around is fixed in kernels from 6.12 (the flag's own help).
            "--netfilter-bug-1766-fix=false",
            "--v=2",
        ],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        # It writes the node's nftables and reads a netlink queue: root with NET_ADMIN, as
        # upstream runs it.
        "securityContext": {"privileged": True, "runAsUser": 0, "runAsNonRoot": False},
        # v0.8.0 removes its rules on SIGINT only (cmd/main.go: signal.NotifyContext with
        # os.Interrupt and unix.SIGINT); the kubelet's SIGTERM would leave them in the node.
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "kill -INT 1; sleep 3"]}}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "serviceAccountName": NAME,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [container],
                },
            },
        },
    }


@contextlib.contextmanager
def enforcing(running: Cluster) -> Iterator[None]:
    """NetworkPolicies enforced while the block runs: the enforcer is up and its rules are in
    the node; afterwards it is removed and its rules are proven gone."""
    record = image()
    session.load_images(running, [record])
    installed = objects(record.pinned)
    session.apply(running, installed)
    try:
        _wait_rolled_out(running)
        _wait_table(running, present=True, what="its nftables table in the node")
        yield
    finally:
        listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": installed})
        running.kubectl("delete", "-f", "-", "--wait=true", "--timeout=120s", stdin=listed,
                        check=False)  # fmt: skip
        _wait_table(running, present=False, what="its rules removed when it stopped")


def _wait_table(running: Cluster, *, present: bool, what: str) -> None:
    """Wait for the enforcer's table to be there (or gone); fail with the enforcer's log."""
    try:
        session.wait_for(lambda: _table_present(running) == present,
                         timeout_s=READY_TIMEOUT_S, what=f"{NAME}: {what}")  # fmt: skip
    except ClusterError as error:
        logs = running.kubectl("logs", "-n", NAMESPACE, "-l", "app=" + NAME, "--tail=30",
                               check=False)  # fmt: skip
        raise ClusterError(f"{error}\n--- {NAME} logs\n{logs.stdout}{logs.stderr}") from error


def _wait_rolled_out(running: Cluster) -> None:
    result = running.kubectl("rollout", "status", f"daemonset/{NAME}", "-n", NAMESPACE,
                             f"--timeout={READY_TIMEOUT_S:.0f}s", check=False)  # fmt: skip
    if result.returncode != 0:
        logs = running.kubectl("logs", "-n", NAMESPACE, f"daemonset/{NAME}", check=False)
        raise ClusterError(f"{NAME} not rolled out: {result.stderr.strip()}\n{logs.stdout[-3000:]}")


def _table_present(running: Cluster) -> bool:
    listed = subprocess.run(
        ["ip", "netns", "exec", running.network.netns, "nft", "list", "table", *TABLE],
        capture_output=True,
        text=True,
        check=False,
    )
    return listed.returncode == 0
