"""Where one test cluster lives: its addresses, its folders, and the configuration files of its
components, written before anything starts.

A cluster owns a *slot* (0-63). The slot gives it a network namespace of its own (the node), a
veth pair to the host, and address ranges no other slot uses, so two clusters (two test
sessions, or `make cluster` beside a test run) never collide, and the node's fixed ports
(6443, 2379, 10250) are free inside its namespace:

    host  <- rfhS 172.31.S.1/30 ==veth== eth0 172.31.S.2/30 -> node (netns radixfleet-S)
    pods 10.244.S.0/24 on bridge cni0 in the node; Services 10.96.S.0/24 (kube-proxy's DNAT).

The host routes the pod and Service ranges to the node, so a test reaches a ClusterIP or a pod
IP directly, as a pod would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_SLOTS = 64
# sockaddr_un's sun_path holds 108 bytes with the terminating NUL.
MAX_SOCKET_PATH = 107
TTRPC_SUFFIX = ".ttrpc"  # containerd's second socket, beside its gRPC one
NODE_NAME = "radixfleet-node"
CLUSTER_DOMAIN = "cluster.local"
APISERVER_PORT = 6443


@dataclass(frozen=True)
class Network:
    """The addresses of the cluster in one slot."""

    slot: int

    @property
    def netns(self) -> str:
        return f"radixfleet-{self.slot}"

    @property
    def host_veth(self) -> str:
        return f"rfh{self.slot}"

    @property
    def host_ip(self) -> str:
        return f"172.31.{self.slot}.1"

    @property
    def node_ip(self) -> str:
        return f"172.31.{self.slot}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.slot}.0/24"

    @property
    def service_cidr(self) -> str:
        return f"10.96.{self.slot}.0/24"

    @property
    def kubernetes_service_ip(self) -> str:
        return f"10.96.{self.slot}.1"

    @property
    def dns_ip(self) -> str:
        return f"10.96.{self.slot}.10"

    @property
    def server(self) -> str:
        return f"https://{self.node_ip}:{APISERVER_PORT}"

    @property
    def cgroup(self) -> str:
        """The cgroup (in every v1 hierarchy) that holds the node and, below it, its pods."""
        return f"radixfleet-{self.slot}"


@dataclass(frozen=True)
class Layout:
    """The folders and files of one cluster. ``run_dir`` is kept for logs and the kubeconfig;
    ``etcd_dir`` is memory-backed and thrown away."""

    run_dir: Path
    etcd_dir: Path
    network: Network

    @property
    def pki(self) -> Path:
        return self.run_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def bin(self) -> Path:
        return self.run_dir / "bin"

    @property
    def kubeconfig(self) -> Path:
        """The administrator's kubeconfig (system:masters), for humans and tests."""
        return self.run_dir / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.run_dir / "kubeconfigs" / f"{component}.yaml"

    @property
    def containerd_dir(self) -> Path:
        return self.run_dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"  # socket_path_problem() checks its length

    @property
    def kubelet_dir(self) -> Path:
        return self.run_dir / "kubelet"

    @property
    def cni_dir(self) -> Path:
        return self.run_dir / "cni"

    @property
    def config_dir(self) -> Path:
        return self.run_dir / "config"

    @property
    def supervisor_pid(self) -> Path:
        return self.run_dir / "node.pid"


def kubeconfig_text(*, server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig with one cluster, one user and one context, all named ``radixfleet``;
    the certificate files are embedded so the file works when copied elsewhere."""
    import base64

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "radixfleet",
                "cluster": {"server": server, "certificate-authority-data": b64(ca)},
            },
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": "radixfleet", "context": {"cluster": "radixfleet", "user": user}}],
        "current-context": "radixfleet",
    }
    # JSON is YAML, and every client reads it.
    return json.dumps(config, indent=2) + "\n"


def socket_path_problem(run_dir: Path) -> str | None:
    """Why containerd could not bind its sockets in a cluster under ``run_dir`` (None: it can).

    A Unix socket's path has at most 107 bytes, and containerd also binds its socket's name
    plus ``.ttrpc``; past that it exits at start saying little (a pytest tmp_path under an xdist
    worker's folder is long enough)."""
    longest = f"{run_dir.resolve() / 'containerd' / 'containerd.sock'}{TTRPC_SUFFIX}"
    size = len(longest.encode())
    if size <= MAX_SOCKET_PATH:
        return None
    return (
        f"the run folder {run_dir} is too long: containerd's socket {longest} would have {size} "
        f"bytes, more than the {MAX_SOCKET_PATH} a Unix socket path may have; use a shorter one"
    )
