"""The node's components and their configuration: what :mod:`testbed.node` starts, in order.

One function per component returns its plan step (name, command line, readiness path) and
writes whatever configuration file it reads. The choices that differ from a kubeadm cluster are
commented where they are made; every one of them is about running on this machine (cgroup v1, no
swap policy, a private namespace, a small disk), none about what the API server enforces.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.layout import APISERVER_PORT, CLUSTER_DOMAIN, NODE_NAME, Layout

Step = dict[str, Any]
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")


def plan(
    layout: Layout, *, kube: Path, sandbox_image: str, images: Sequence[tuple[Path, str]]
) -> list[Step]:
    """Every process of the node, in start order, with the images imported before the kubelet
    starts (no registry can be reached, so the sandbox image must be there first)."""
    for folder in (layout.config_dir, layout.logs, layout.bin):
        folder.mkdir(parents=True, exist_ok=True)
    return [
        etcd(layout),
        apiserver(layout, kube),
        controller_manager(layout, kube),
        scheduler(layout, kube),
        containerd(layout, sandbox_image=sandbox_image),
        *(import_image(layout, archive, reference) for archive, reference in images),
        kubelet(layout, kube),
        kube_proxy(layout, kube),
    ]


def import_image(layout: Layout, archive: Path, reference: str) -> Step:
    """Import an OCI archive into the namespace the CRI plugin reads (``k8s.io``), under its
    ``reference`` (``repo:tag``) and under ``repo@sha256:<digest>``: pods name images by digest."""
    ctr = _which("ctr", hint="Debian: apt-get install containerd")
    repository = reference.rpartition(":")[0]
    argv = [
        ctr,
        f"--address={layout.containerd_socket}",
        "--namespace=k8s.io",
        "images",
        "import",
        "--digests",
        f"--base-name={repository}",
        str(archive),
    ]
    name = repository.rpartition("/")[2]
    return {"name": f"import-{name}", "argv": argv, "ready": None, "once": True}


def etcd(layout: Layout) -> Step:
    binary = _which("etcd", hint="Debian: apt-get install etcd-server")
    # etcd 3.4 (Debian) has no --unsafe-no-fsync; its data is in memory (/dev/shm) instead.
    argv = [
        binary,
        "--name=node",
        f"--data-dir={layout.etcd_dir}",
        "--listen-client-urls=http://127.0.0.1:2379",
        "--advertise-client-urls=http://127.0.0.1:2379",
        "--listen-peer-urls=http://127.0.0.1:2380",
        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
        "--initial-cluster=node=http://127.0.0.1:2380",
        "--listen-metrics-urls=http://127.0.0.1:2381",
    ]
    return {"name": "etcd", "argv": argv, "ready": None}


def apiserver(layout: Layout, kube: Path) -> Step:
    net, pki = layout.network, layout.pki
    argv = [
        str(kube),
        "kube-apiserver",
        f"--advertise-address={net.node_ip}",
        "--bind-address=0.0.0.0",  # inside the node's namespace: its loopback and its veth only
        f"--secure-port={APISERVER_PORT}",
        "--etcd-servers=http://127.0.0.1:2379",
        f"--service-cluster-ip-range={net.service_cidr}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        # What a production cluster enforces: Node and RBAC authorization, the default admission
        # plugins (ValidatingAdmissionPolicy and webhooks among them) plus NodeRestriction.
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # Beta in 1.35, off by default: the README's kubectl path test fits the catalog's pods
        # (sized for a p5 node) to this 2-core node with one (tests/cluster/test_readme.py).
        "--feature-gates=MutatingAdmissionPolicy=true",
        "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
        "--allow-privileged=true",
        "--profiling=false",
        "--event-ttl=1h",
        *_audit(layout),
    ]
    # The controllers start once the API server is ready (RBAC's bootstrap roles are in), as
    # kubeadm's static pods effectively do; until then they would fail on 403s.
    ready = {
        "url": f"https://127.0.0.1:{APISERVER_PORT}/readyz",
        "ca": str(pki / "ca.crt"),
        "cert": str(pki / "admin.crt"),
        "key": str(pki / "admin.key"),
    }
    return {"name": "kube-apiserver", "argv": argv, "ready": ready}


# Who deleted what, and when: each deletion's metadata (never a body: no Secret's value), in
# the cluster's logs folder, kept with the folder when a test fails. A revision deleted under a
# test left no other trace (the kube-controller-manager logs only what its own GC failed at).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["delete", "deletecollection"]},
        {"level": "None"},
    ],
}


def _audit(layout: Layout) -> list[str]:
    policy = layout.config_dir / "audit-policy.json"
    policy.write_text(json.dumps(AUDIT_POLICY, indent=2) + "\n")
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={layout.logs / 'audit.log'}",
        "--audit-log-maxsize=50",  # MiB; one old file kept
        "--audit-log-maxbackup=1",
    ]


def controller_manager(layout: Layout, kube: Path) -> Step:
    net, pki = layout.network, layout.pki
    config = layout.component_kubeconfig("kube-controller-manager")
    argv = [
        str(kube),
        "kube-controller-manager",
        f"--kubeconfig={config}",
        f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
        "--bind-address=127.0.0.1",
        "--allocate-node-cidrs=true",
        f"--cluster-cidr={net.pod_cidr}",
        "--node-cidr-mask-size=24",
        f"--service-cluster-ip-range={net.service_cidr}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        "--use-service-account-credentials=true",
        "--controllers=*,bootstrapsigner,tokencleaner",
        "--leader-elect=false",  # one node, one of each: nothing to elect
    ]
    return {"name": "kube-controller-manager", "argv": argv, "ready": None}


def scheduler(layout: Layout, kube: Path) -> Step:
    config = layout.component_kubeconfig("kube-scheduler")
    argv = [
        str(kube),
        "kube-scheduler",
        f"--kubeconfig={config}",
        f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
    ]
    return {"name": "kube-scheduler", "argv": argv, "ready": None}


def containerd(layout: Layout, *, sandbox_image: str) -> Step:
    binary = _which("containerd", hint="Debian: apt-get install containerd")
    folder = layout.containerd_dir
    cni_conf = layout.cni_dir / "net.d"
    cni_conf.mkdir(parents=True, exist_ok=True)
    (cni_conf / "10-radixfleet.conflist").write_text(json.dumps(_cni(layout), indent=2))
    config = layout.config_dir / "containerd.toml"
    config.write_text(_containerd_toml(layout, sandbox_image=sandbox_image, cni_conf=cni_conf))
    argv = [binary, f"--config={config}"]
    return {"name": "containerd", "argv": argv, "ready": str(folder / "containerd.sock")}


def _containerd_toml(layout: Layout, *, sandbox_image: str, cni_conf: Path) -> str:
    folder = layout.containerd_dir
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{folder / "root"}"
state = "{folder / "state"}"
# Snapshotters this machine has no use for; skipping them keeps start-up quiet and quick.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{folder / "containerd.sock"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{folder / "opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  # This machine's processes may not lower their OOM score (no CAP_SYS_RESOURCE here), and the
  # kubelet asks -998 for sandboxes: cap the request at containerd's own score instead.
  restrict_oom_score_adj = true
  # No registry can be reached: every image is imported before it is used.
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{_cni_bin_dir()}"
    conf_dir = "{cni_conf}"
"""


def _cni(layout: Layout) -> dict[str, Any]:
    net = layout.network
    bridge = {
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "isDefaultGateway": True,
        # Pods talk only to the node and each other; nothing is masqueraded out of the node.
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": net.pod_cidr}]],
            "dataDir": str(layout.cni_dir / "ipam"),
        },
    }
    ports = {"type": "portmap", "capabilities": {"portMappings": True}}
    return {"cniVersion": "1.0.0", "name": "radixfleet", "plugins": [bridge, ports]}


def kubelet(layout: Layout, kube: Path) -> Step:
    config = layout.config_dir / "kubelet.json"
    config.write_text(json.dumps(_kubelet_config(layout), indent=2))
    argv = [
        str(kube),
        "kubelet",
        f"--config={config}",
        f"--kubeconfig={layout.component_kubeconfig('kubelet')}",
        f"--root-dir={layout.kubelet_dir}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={layout.network.node_ip}",
    ]
    return {"name": "kubelet", "argv": argv, "ready": None}


def _kubelet_config(layout: Layout) -> dict[str, Any]:
    net, pki = layout.network, layout.pki
    resolv = layout.config_dir / "resolv.conf"
    # Pods resolve cluster names through CoreDNS; nothing outside the cluster is reachable.
    resolv.write_text(f"nameserver {net.dns_ip}\n")
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine mounts cgroup v1; the kubelet (1.35 on) refuses it unless told otherwise.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        # Pods' cgroups below the cluster's own, so teardown finds every process it started.
        "cgroupRoot": f"/{net.cgroup}",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": net.node_ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [net.dns_ip],
        "resolvConf": str(resolv),
        "podLogsDir": str(layout.run_dir / "pod-logs"),
        "failSwapOn": False,
        # A shared CI disk may be fuller than a node's would be: evict only when really full,
        # and never collect the images imported for the run (nothing can pull them back).
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "maxPods": 110,
        # How often the kubelet syncs each pod, which is also how soon a changed Secret reaches
        # a pod's volume: Prometheus reads its configuration so (prometheus-operator rewrites
        # the Secret when a PodMonitor changes). The default, 1 min, made each test that adds
        # a monitor wait that long for its first scrape.
        "syncFrequency": "10s",
    }


def kube_proxy(layout: Layout, kube: Path) -> Step:
    net = layout.network
    config = layout.config_dir / "kube-proxy.json"
    settings = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.component_kubeconfig("kube-proxy"))},
        "mode": "iptables",
        "clusterCIDR": net.pod_cidr,
        "hostnameOverride": NODE_NAME,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # 0 leaves the kernel's conntrack settings alone (they are not this namespace's to set).
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    config.write_text(json.dumps(settings, indent=2))
    return {
        "name": "kube-proxy",
        "argv": [str(kube), "kube-proxy", f"--config={config}"],
        "ready": None,
    }


def _which(name: str, *, hint: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        raise FileNotFoundError(f"no {name} on PATH ({hint})")
    return found


def _cni_bin_dir() -> str:
    for folder in CNI_BIN_DIRS:
        if (Path(folder) / "bridge").is_file():
            return folder
    raise FileNotFoundError("no CNI plugins (Debian: apt-get install containernetworking-plugins)")
