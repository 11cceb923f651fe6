"""A test cluster ready for radixfleet: the node up with the images built here, CoreDNS running,
and the node advertising the GPUs its predictors ask for. What ``make cluster`` and the ``cluster``
pytest fixture both start.

No GPU exists on these machines: the node advertises ``nvidia.com/gpu`` as an extended resource
through its status (Kubernetes' documented way to advertise a node-level resource), so the
scheduler places predictors that request GPUs exactly as on a GPU node; the containers run the
emulated SGLang replica, which needs none.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from testbed import addons, dns, fake_kingress, images
from testbed import cluster as cluster_mod
from testbed.builds import COREDNS, KNATIVE, KSERVE, KSERVE_LOCALMODEL
from testbed.cluster import Cluster, ClusterError
from testbed.gobuild import BuildError, ensure_built
from testbed.images import ImageError
from testbed.layout import NODE_NAME

GPUS_PER_NODE = 8
READY_TIMEOUT_S = 180.0
# The labels a GPU node group of infra/ carries, so catalog predictors schedule here (infra's
# gpu_node_labels writes the GPU type as `gpu_label_value` spells it, lower case).
NODE_LABELS = {
    "radixfleet.io/gpu-type": "h100",
    "radixfleet.io/gpu-pool": "h100",
    "radixfleet.io/capacity-type": "on-demand",
}


class UnavailableError(Exception):
    """The cluster cannot be had on this machine (a missing tool, a failed build, a start that
    timed out); the message says which and ends with the components' logs."""


def start(run_dir: Path) -> Cluster:
    """Build what is missing, start the cluster and its add-ons; raise UnavailableError."""
    try:
        pause, coredns = _base_images()
        running = cluster_mod.up(
            run_dir,
            sandbox_image=pause.reference,
            images=[(image.archive, image.reference) for image in (pause, coredns)],
        )
    except (ClusterError, BuildError, ImageError, OSError) as error:
        raise UnavailableError(str(error)) from error
    try:
        advertise_gpus(running, count=GPUS_PER_NODE, labels=NODE_LABELS)
        apply(running, dns.objects(running.network, image=coredns.pinned))
        wait_rollout(running, namespace=dns.NAMESPACE, deployment=dns.NAME)
    except ClusterError as error:
        cluster_mod.down(running.layout)
        raise UnavailableError(str(error)) from error
    return running


def _base_images() -> tuple[images.ImageRecord, images.ImageRecord]:
    """The sandbox (pause) image and CoreDNS's, built here or found in the cache."""
    coredns_binary = ensure_built(COREDNS) / "coredns"
    coredns = images.go_binary_image(
        "coredns", coredns_binary, entrypoint=["/usr/local/bin/coredns"]
    )
    return images.pause(), coredns


# Knative Serving's Deployments (the queue-proxy is a sidecar of each revision's pods).
KNATIVE_DEPLOYMENTS = ("controller", "webhook", "autoscaler", "activator")


def install_kserve(
    running: Cluster,
    *,
    modes: Sequence[addons.Mode] = ("Standard",),
    knative_features: Mapping[str, str] | None = None,
) -> None:
    """KServe v0.20.0 (built here, with its storage-initializer) and its webhooks, ready to
    admit and reconcile; with ``Knative`` in ``modes``, Knative Serving 1.21.1 (built here)
    under it, its config-features set to ``knative_features``. The first mode is KServe's
    default."""
    binary = ensure_built(KSERVE) / "manager"
    manager = images.go_binary_image(
        "kserve-manager", binary, entrypoint=["/manager"], path="/manager"
    )
    # KServe's storage-initializer downloads what a local model cache holds onto the nodes.
    built = {addons.KSERVE_MANAGER: manager,
             addons.KSERVE_STORAGE_INITIALIZER: images.storage_initializer()}  # fmt: skip
    if "Knative" in modes:
        built |= _knative_images()
    load_images(running, list(built.values()))
    objects = addons.render_addons(
        {key: image.pinned for key, image in built.items()},
        modes=modes,
        knative_features=knative_features,
    )
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    apply(running, crds)
    wait_established(running, [crd["metadata"]["name"] for crd in crds])
    apply(running, [o for o in objects if o["kind"] != "CustomResourceDefinition"])
    if "Knative" in modes:
        for deployment in KNATIVE_DEPLOYMENTS:
            wait_rollout(running, namespace=addons.KNATIVE_NAMESPACE, deployment=deployment)
    wait_rollout(running, namespace=addons.KSERVE_NAMESPACE, deployment="kserve-controller-manager")


# KServe's local model controller's Deployment (its upstream name).
LOCALMODEL_CONTROLLER_DEPLOYMENT = "kserve-localmodel-controller-manager"


def install_local_models(running: Cluster, *, host_path: Path) -> list[dict[str, Any]]:
    """KServe's local model controller and node agent (v0.20.0, built here) beside an installed
    KServe, the agent on the nodes KServe's own selector picks, keeping models under
    ``host_path``; returns what was applied, for :func:`remove`."""
    folder = ensure_built(KSERVE_LOCALMODEL)
    built = {
        key: images.go_binary_image(key, folder / binary, entrypoint=["/manager"], path="/manager")
        for key, binary in ((addons.LOCALMODEL_CONTROLLER, "localmodel"),
                            (addons.LOCALMODEL_AGENT, "localmodelnode"))
    }  # fmt: skip
    load_images(running, list(built.values()))
    objects = addons.local_model_objects(
        {key: image.pinned for key, image in built.items()}, host_path=str(host_path)
    )
    apply(running, objects)
    wait_rollout(
        running, namespace=addons.KSERVE_NAMESPACE, deployment=LOCALMODEL_CONTROLLER_DEPLOYMENT
    )
    return objects


def remove(running: Cluster, objects: Sequence[Mapping[str, Any]]) -> None:
    """Delete ``objects`` (webhook configurations first: none may outlive its server) and wait
    for them to go."""
    ordered = sorted(objects, key=lambda o: o["kind"] not in addons.LAST_KINDS)
    documents = {"apiVersion": "v1", "kind": "List", "items": list(ordered)}
    running.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=120s",
                    stdin=json.dumps(documents), check=False)  # fmt: skip


def _knative_images() -> dict[str, images.ImageRecord]:
    """One image per Knative program, its binary the entrypoint (Knative's Deployments and the
    queue-proxy sidecar set no command)."""
    folder = ensure_built(KNATIVE)
    return {
        f"knative-{command}": images.go_binary_image(
            f"knative-{command}",
            folder / command,
            entrypoint=[f"/usr/local/bin/{command}"],
        )
        for command in addons.KNATIVE_COMMANDS
    }


class KubectlKIngresses:
    """The KIngresses of the cluster through kubectl, for :mod:`testbed.fake_kingress`. Each
    call ends within ``CALL_TIMEOUT_S``, and none is made once ``stopped`` is set, so the loop
    that uses it ends soon after it is told to, whatever state the cluster is in."""

    CALL_TIMEOUT_S = 10.0

    def __init__(self, running: Cluster, stopped: threading.Event) -> None:
        self.running, self.stopped = running, stopped
        self.resource = f"{fake_kingress.PLURAL}.{fake_kingress.GROUP}"

    def list_all(self) -> list[dict[str, Any]]:
        result = self._kubectl("get", self.resource, "-A", "-o", "json")
        if result is None or result.returncode != 0:
            return []
        items: list[dict[str, Any]] = json.loads(result.stdout).get("items", [])
        return items

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._kubectl("patch", self.resource, name, "-n", namespace, "--subresource=status",
                      "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip

    def _kubectl(self, *args: str) -> subprocess.CompletedProcess[str] | None:
        """kubectl's answer; None once stopped or when it did not answer in time (the next
        round tries again)."""
        if self.stopped.is_set():
            return None
        try:
            return self.running.kubectl(*args, check=False, timeout_s=self.CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None


def load_images(running: Cluster, records: Sequence[images.ImageRecord]) -> None:
    """Import images built after the cluster started."""
    for record in records:
        images.load_into_containerd(record, address=str(running.layout.containerd_socket))


def stop(running: Cluster) -> None:
    cluster_mod.down(running.layout)


def apply(running: Cluster, objects: Sequence[Mapping[str, Any]]) -> None:
    """Server-side apply, as a platform team's ``kubectl apply --server-side`` would."""
    documents = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    running.kubectl(
        "apply",
        "--server-side",
        "--field-manager=radixfleet-testbed",
        "-f",
        "-",
        stdin=json.dumps(documents),
    )


def advertise_gpus(running: Cluster, *, count: int, labels: Mapping[str, str]) -> None:
    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(count)}]
    running.kubectl(
        "patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(patch)
    )
    running.kubectl(
        "label",
        "node",
        NODE_NAME,
        "--overwrite",
        *(f"{key}={value}" for key, value in labels.items()),
    )


def wait_rollout(running: Cluster, *, namespace: str, deployment: str) -> None:
    result = running.kubectl(
        "rollout",
        "status",
        f"deployment/{deployment}",
        "-n",
        namespace,
        f"--timeout={READY_TIMEOUT_S:.0f}s",
        check=False,
    )
    if result.returncode != 0:
        pods = running.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        raise ClusterError(
            f"{namespace}/{deployment} not rolled out: {result.stderr.strip()}\n{pods}\n"
            f"{cluster_mod.logs_tail(running.layout)}"
        )


def wait_established(running: Cluster, crds: Sequence[str]) -> None:
    """Wait until each CRD (by name) is Established: its resources are served only from then.
    (``kubectl wait`` gives up at once on a CRD whose conditions are not written yet.)"""

    def established() -> bool:
        result = running.kubectl("get", "crd", *crds, "-o", "json", check=False)
        if result.returncode != 0:
            return False
        items = json.loads(result.stdout).get("items", [])
        return len(items) == len(crds) and all(map(_is_established, items))

    wait_for(established, timeout_s=READY_TIMEOUT_S, what=f"CRDs {', '.join(crds)} Established")


def _is_established(crd: Mapping[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def wait_for(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Poll ``predicate()`` until it is true; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1.0)
    raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@contextlib.contextmanager
def kingresses_marked_ready(running: Cluster, *, every_s: float = 2.0) -> Iterator[None]:
    """TEST HELPER, NOT A NETWORKING LAYER: while the block runs, every Knative KIngress is
    marked ready (``testbed.fake_kingress``: nothing routes by host name; see its docstring).
    The thread that marks them has ended when the block has: the cluster may go right after."""
    stop = threading.Event()
    api = KubectlKIngresses(running, stop)

    def loop() -> None:
        while not stop.wait(every_s):
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            fake_kingress.mark_all_ready(api, now=now)

    thread = threading.Thread(target=loop, name="fake-kingress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=3 * api.CALL_TIMEOUT_S)  # one call under way at most
        if thread.is_alive():
            raise ClusterError("the fake-KIngress thread did not stop")


class Senders:
    """Clients of the cluster under test: `count` threads, each running `_send(index)` (a
    subclass's loop, which ends once `stop` is set) while the `with` block runs; what fails
    goes in `failures`."""

    def __init__(self, count: int = 2, *, join_timeout_s: float = 60.0) -> None:
        self.stop, self.failures = threading.Event(), list[str]()
        self.join_timeout_s = join_timeout_s
        self.threads = [threading.Thread(target=self._send, args=(i,)) for i in range(count)]

    def __enter__(self) -> Self:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=self.join_timeout_s)

    def _send(self, index: int) -> None:
        raise NotImplementedError
