"""The node's supervisor: runs inside the cluster's network and mount namespaces and starts the
node's processes in order, then waits; on SIGTERM it stops them in reverse order.

It is started by :mod:`testbed.cluster` as ``nsenter --net=/run/netns/radixfleet-S unshare
--mount --propagation private python -m testbed.node PLAN``, so that everything it starts
shares one private mount namespace (the kubelet's volume mounts are seen by containerd's
containers, and every mount vanishes with the namespace) and one network namespace (the
bridge, the pods' veths and kube-proxy's iptables rules vanish with it).

The plan is a JSON list of ``{"name", "argv", "ready", "once"}`` written by the cluster: a
server, with ``ready`` what must hold before the next step starts (a path that exists, such as
a socket, or ``{"url", "ca", "cert", "key"}`` answering 200), or a ``once`` step that must run
to completion and succeed (an image import). A server that exits is started again after a
pause, as the kubelet restarts a control plane's static pods, up to a limit.
Standard library only.
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
MAX_RESTARTS = 5
RESTART_PAUSE_S = 2.0
# Mounted fresh in the private mount namespace: containerd keeps the pods' network namespaces
# under /run/netns and its shims' sockets under /run/containerd; private copies keep the host's
# untouched and vanish with the node.
PRIVATE_TMPFS = ("/run/netns", "/run/containerd")


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    logs = Path(plan_path).parent.parent / "logs"
    logs.mkdir(exist_ok=True)
    _private_mounts()
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        servers = [step for step in plan if not step.get("once")]
        for step in plan:
            if stopping:
                break
            if step.get("once"):
                _run_once(step, logs)
                continue
            children.append(_start(step, logs))
            _wait_ready(step, children[-1])
        print("node: all started", flush=True)
        restarts = dict.fromkeys(range(len(servers)), 0)
        while not stopping:
            time.sleep(0.5)
            for index, (child, step) in enumerate(zip(children, servers, strict=False)):
                if child.poll() is None or stopping:
                    continue
                print(f"node: {step['name']} exited with {child.returncode}", flush=True)
                restarts[index] += 1
                if restarts[index] > MAX_RESTARTS:
                    return 1
                time.sleep(RESTART_PAUSE_S)
                children[index] = _start(step, logs)
    finally:
        _stop_all(children)
    return 0


def _private_mounts() -> None:
    for target in PRIVATE_TMPFS:
        Path(target).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", target], check=True)


def _start(step: dict[str, object], logs: Path) -> subprocess.Popen[bytes]:
    argv = [str(a) for a in step["argv"]]  # type: ignore[attr-defined]
    with (logs / f"{step['name']}.log").open("ab") as out:
        print(f"node: starting {step['name']}", flush=True)
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)


def _run_once(step: dict[str, object], logs: Path) -> None:
    child = _start(step, logs)
    if child.wait() != 0:
        raise SystemExit(f"node: {step['name']} failed with {child.returncode}")


def _wait_ready(step: dict[str, object], child: subprocess.Popen[bytes]) -> None:
    ready = step.get("ready")
    if not ready:
        return
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _is_ready(ready):
        if child.poll() is not None:
            raise SystemExit(f"node: {step['name']} exited with {child.returncode} before ready")
        if time.monotonic() > deadline:
            raise SystemExit(f"node: {step['name']} not ready in {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def _is_ready(ready: object) -> bool:
    if isinstance(ready, dict):
        context = ssl.create_default_context(cafile=ready["ca"])
        context.load_cert_chain(ready["cert"], ready["key"])
        try:
            with urllib.request.urlopen(ready["url"], context=context, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False
    return Path(str(ready)).exists()


def _stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    """Reverse order: the kubelet and kube-proxy before containerd, the API server before etcd."""
    for child in reversed(children):
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
