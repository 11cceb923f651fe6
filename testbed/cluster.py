"""Bring a one-node Kubernetes cluster up on this machine, and take it down without a trace.

``up()`` takes a free slot (see :mod:`testbed.layout`), makes the certificates and kubeconfigs,
a network namespace with a veth pair to the host, and a cgroup in every v1 hierarchy; starts the
node's supervisor (:mod:`testbed.node`) inside the namespace and waits until the API server
answers and the node is Ready. ``down()`` stops the supervisor, kills whatever is left in the
cluster's cgroups (containerd's shims and the containers outlive their parent on purpose),
removes the cgroups, the namespace (and with it the veth, the bridge, kube-proxy's rules and the
host routes through it) and the memory-backed etcd data. Logs stay in the run folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import components, pki
from testbed.builds import KUBE
from testbed.gobuild import ensure_built
from testbed.layout import (
    MAX_SLOTS,
    NODE_NAME,
    Layout,
    Network,
    kubeconfig_text,
    socket_path_problem,
)

CGROUP_ROOT = Path("/sys/fs/cgroup")
SLOT_LOCK = Path("/run/lock/radixfleet-cluster-slots.lock")
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0
# Who each component is to the API server (user, groups), as kubeadm names them.
IDENTITIES = {
    "admin": pki.Identity("radixfleet-admin", ("system:masters",)),
    "apiserver-kubelet-client": pki.Identity("kube-apiserver-kubelet-client", ("system:masters",)),
    "kube-controller-manager": pki.Identity("system:kube-controller-manager"),
    "kube-scheduler": pki.Identity("system:kube-scheduler"),
    "kubelet": pki.Identity(f"system:node:{NODE_NAME}", ("system:nodes",)),
    "kube-proxy": pki.Identity("system:kube-proxy"),
}


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Whether an object's status says `Ready: True` (a pod's, an InferenceService's, ...)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class ClusterError(Exception):
    """The cluster could not be brought up; the message ends with the logs that say why."""


@dataclass(frozen=True)
class Cluster:
    """A running cluster: where its files are and how to reach it."""

    layout: Layout

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def network(self) -> Network:
        return self.layout.network

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
        timeout_s: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the cluster's own kubectl (1.35), as the administrator unless ``kubeconfig``
        names another identity (see :meth:`token_kubeconfig`); past ``timeout_s`` it is killed
        and ``subprocess.TimeoutExpired`` raised."""
        config = kubeconfig or self.kubeconfig
        command = [str(self.layout.bin / "kubectl"), f"--kubeconfig={config}", *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True,
                                check=False, timeout=timeout_s)  # fmt: skip
        if check and result.returncode != 0:
            what = " ".join(args)
            raise ClusterError(f"kubectl {what}: exit {result.returncode}\n{result.stderr}")
        return result

    def pod_memory_cgroup(self, uid: str) -> Path:
        """The memory cgroup (v1) of the pod with `uid`: the kubelet puts pods below the node's
        own cgroup (`cgroupRoot`), by their QoS class. Its `memory.max_usage_in_bytes` is the
        peak the kubelet's limit and the kernel's OOM killer judge."""
        root = Path("/sys/fs/cgroup/memory") / self.network.cgroup
        found = sorted(root.glob(f"kubepods*/**/pod{uid}"))
        if len(found) != 1:
            raise ClusterError(f"pod {uid}: {len(found)} memory cgroups under {root}")
        return found[0]

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig at ``path`` that authenticates with a bearer token (a ServiceAccount's)."""
        config = json.loads(self.kubeconfig.read_text())
        config["users"] = [{"name": "token", "user": {"token": token}}]
        config["contexts"][0]["context"]["user"] = "token"
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path


def up(run_dir: Path, *, sandbox_image: str, images: Sequence[tuple[Path, str]] = ()) -> Cluster:
    """Start a cluster whose files live in ``run_dir`` (emptied first), with ``images`` (OCI
    archives and the reference each carries) imported; ``sandbox_image`` names one of them."""
    kube = ensure_built(KUBE) / "kube"
    problem = socket_path_problem(run_dir)
    if problem is not None:  # before anything starts: containerd would exit saying little
        raise ClusterError(problem)
    with _slot_lock():
        network = Network(_free_slot())
        layout = _fresh_layout(run_dir, network)
        save_layout(layout)
        _make_pki(layout)
        try:
            _host_network(network)  # under the lock: the namespace is what marks a slot taken
        except BaseException:
            down(layout)
            raise
    cluster = Cluster(layout)
    try:
        _make_cgroups(network)
        _link_binaries(layout, kube)
        steps = components.plan(layout, kube=kube, sandbox_image=sandbox_image, images=images)
        plan_file = layout.config_dir / "plan.json"
        plan_file.write_text(json.dumps(steps, indent=2))
        _start_supervisor(layout, plan_file)
        _wait_until_ready(cluster)
    except BaseException:
        down(layout)
        raise
    return cluster


def down(layout: Layout) -> None:
    """Stop everything of the cluster; safe to call twice, or on a half-started cluster."""
    _stop_supervisor(layout)
    _sweep_cgroups(layout.network)
    subprocess.run(
        ["ip", "netns", "delete", layout.network.netns], capture_output=True, check=False
    )
    subprocess.run(
        ["ip", "link", "delete", layout.network.host_veth], capture_output=True, check=False
    )
    shutil.rmtree(layout.etcd_dir, ignore_errors=True)


def save_layout(layout: Layout) -> None:
    """Record where the cluster lives, so a later process can take it down (``load_layout``)."""
    saved = {"slot": layout.network.slot, "etcd_dir": str(layout.etcd_dir)}
    (layout.run_dir / "layout.json").write_text(json.dumps(saved))


def load_layout(run_dir: Path) -> Layout | None:
    """The layout a cluster in ``run_dir`` recorded, or None when there is none."""
    try:
        saved = json.loads((run_dir / "layout.json").read_text())
    except (OSError, ValueError):
        return None
    return Layout(
        run_dir=run_dir.resolve(),
        etcd_dir=Path(saved["etcd_dir"]),
        network=Network(int(saved["slot"])),
    )


# --- files --------------------------------------------------------------------------------


def _fresh_layout(run_dir: Path, network: Network) -> Layout:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    etcd_dir = Path(_memory_dir()) / f"radixfleet-etcd-{network.slot}"
    shutil.rmtree(etcd_dir, ignore_errors=True)
    return Layout(run_dir=run_dir.resolve(), etcd_dir=etcd_dir, network=network)


def _memory_dir() -> str:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else "/tmp"


def _make_pki(layout: Layout) -> None:
    net = layout.network
    ca = pki.Authority(layout.pki, name="radixfleet-test-ca")
    service = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
    ]
    ca.server("apiserver", dns=service, ips=[net.node_ip, net.kubernetes_service_ip, "127.0.0.1"])
    ca.server("kubelet", dns=[NODE_NAME], ips=[net.node_ip])
    pki.signing_key(layout.pki, "sa")
    for name, identity in IDENTITIES.items():
        pair = ca.client(name, identity)
        target = layout.kubeconfig if name == "admin" else layout.component_kubeconfig(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            kubeconfig_text(
                server=net.server, ca=ca.pair.cert, cert=pair.cert, key=pair.key, user=identity.user
            )
        )
        target.chmod(0o600)


def _link_binaries(layout: Layout, kube: Path) -> None:
    layout.bin.mkdir(parents=True, exist_ok=True)
    (layout.bin / "kubectl").symlink_to(kube)


# --- network ------------------------------------------------------------------------------


@contextlib.contextmanager
def _slot_lock() -> Iterator[None]:
    SLOT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with SLOT_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _free_slot() -> int:
    taken = {p.name for p in Path("/run/netns").glob("radixfleet-*")}
    for slot in range(MAX_SLOTS):
        if Network(slot).netns not in taken:
            return slot
    raise ClusterError(f"all {MAX_SLOTS} cluster slots are taken (ip netns list)")


def _host_network(net: Network) -> None:
    inside = ["ip", "netns", "exec", net.netns]
    for command in (
        ["ip", "netns", "add", net.netns],
        [
            "ip",
            "link",
            "add",
            net.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            net.netns,
        ],
        ["ip", "addr", "add", f"{net.host_ip}/30", "dev", net.host_veth],
        ["ip", "link", "set", net.host_veth, "up"],
        [*inside, "ip", "addr", "add", f"{net.node_ip}/30", "dev", "eth0"],
        [*inside, "ip", "link", "set", "eth0", "up"],
        [*inside, "ip", "link", "set", "lo", "up"],
        [*inside, "ip", "route", "add", "default", "via", net.host_ip],
        # Pods and Services are reached from the host through the node, as from a pod.
        ["ip", "route", "add", net.pod_cidr, "via", net.node_ip],
        ["ip", "route", "add", net.service_cidr, "via", net.node_ip],
    ):
        _run(command)
    # The node forwards between the bridge, its veth and kube-proxy's DNAT.
    _run([*inside, "sysctl", "-qw", "net.ipv4.ip_forward=1"])


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"{' '.join(command)}: {result.stderr.strip()}")


# --- cgroups ------------------------------------------------------------------------------


def _hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (cpu, memory, pids, ..., and the named systemd one)."""
    return sorted(
        p
        for p in CGROUP_ROOT.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
    )


def _make_cgroups(net: Network) -> None:
    for hierarchy in _hierarchies():
        group = hierarchy / net.cgroup
        group.mkdir(exist_ok=True)
        if (hierarchy / "cpuset.cpus").exists():
            # A new cpuset is empty and takes no process until it is given CPUs and memory.
            for name in ("cpuset.cpus", "cpuset.mems"):
                (group / name).write_text((hierarchy / name).read_text())


def _sweep_cgroups(net: Network) -> None:
    """Kill every process in the cluster's cgroups, then remove them, deepest first."""
    for _ in range(20):
        pids = _cgroup_pids(net)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    for hierarchy in _hierarchies():
        top = hierarchy / net.cgroup
        if not top.is_dir():
            continue
        for group in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                group.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _cgroup_pids(net: Network) -> set[int]:
    pids: set[int] = set()
    for hierarchy in _hierarchies():
        top = hierarchy / net.cgroup
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(line) for line in procs.read_text().split())
    return pids


# --- the node -----------------------------------------------------------------------------


def _start_supervisor(layout: Layout, plan_file: Path) -> None:
    net = layout.network
    command = [
        "nsenter",
        f"--net=/run/netns/{net.netns}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        sys.executable,
        "-m",
        "testbed.node",
        str(plan_file),
    ]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    with (layout.logs / "node.log").open("ab") as out:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,
            preexec_fn=lambda: _join_cgroups(net),
        )
    layout.supervisor_pid.write_text(str(process.pid))


def _join_cgroups(net: Network) -> None:
    """Runs in the child before exec: everything the node starts inherits these cgroups."""
    for hierarchy in _hierarchies():
        (hierarchy / net.cgroup / "cgroup.procs").write_text(str(os.getpid()))


def _stop_supervisor(layout: Layout) -> None:
    try:
        pid = int(layout.supervisor_pid.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    layout.supervisor_pid.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        # Our own child: reap it, or it stays a zombie that os.kill still finds.
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    return True


def _wait_until_ready(cluster: Cluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    layout = cluster.layout
    while time.monotonic() < deadline:
        if not _alive(int(layout.supervisor_pid.read_text())):
            raise ClusterError(f"the node stopped while starting\n{logs_tail(layout)}")
        if _apiserver_ready(layout) and _node_ready(cluster):
            return
        time.sleep(1.0)
    raise ClusterError(f"not ready in {START_TIMEOUT_S:.0f} s\n{logs_tail(layout)}")


def restart_apiserver(cluster: Cluster, *, timeout_s: float = START_TIMEOUT_S) -> float:
    """Kill the API server (SIGKILL: a crash, every watch cut without a goodbye); the node's
    supervisor starts it again, as the kubelet restarts a static pod. Returns the seconds until
    it answered ``/readyz`` again. (SIGTERM would be gentler and slower: the API server drains
    its watches for a minute first.)"""
    layout = cluster.layout
    (pid,) = [p for p in _cgroup_pids(layout.network) if _argv(p)[1:2] == ["kube-apiserver"]]
    stopped_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while _alive(pid) or not _apiserver_ready(layout):
        if time.monotonic() - stopped_at > timeout_s:
            raise ClusterError(f"API server not back in {timeout_s:.0f} s\n{logs_tail(layout)}")
        time.sleep(0.5)
    return time.monotonic() - stopped_at


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _apiserver_ready(layout: Layout) -> bool:
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(layout.pki / "admin.crt", layout.pki / "admin.key")
    url = f"{layout.network.server}/readyz"
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(url, context=context, timeout=5) as response,
    ):
        return bool(response.status == 200)
    return False


def _node_ready(cluster: Cluster) -> bool:
    result = cluster.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    return is_ready(json.loads(result.stdout))


def logs_tail(layout: Layout, lines: int = 15) -> str:
    """The last lines of every component's log, for an error message."""
    parts = []
    for log in sorted(layout.logs.glob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log.name} (last {len(text)} lines)\n" + "\n".join(text))
    return "\n".join(parts)
