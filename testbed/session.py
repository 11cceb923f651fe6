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
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import yaml

from infra.manifests import SYSTEM_NODE_LABELS
from testbed import certificates, charts, dns, fake_kingress, images, knative, kserve, prometheus
from testbed import cluster as cluster_mod
from testbed.builds import (
    COREDNS,
    KNATIVE,
    KNATIVE_OPERATOR,
    KSERVE,
    KSERVE_LOCALMODEL,
    KUBE_RBAC_PROXY,
)
from testbed.cluster import Cluster, ClusterError, is_ready
from testbed.gobuild import BuildError, ensure_built
from testbed.images import ImageError
from testbed.layout import NODE_NAME

GPUS_PER_NODE = 8
FIELD_MANAGER = "radixfleet-testbed"
READY_TIMEOUT_S = 180.0
# Serving's five Deployments start together, beside KServe's, on two shared cores.
KNATIVE_READY_TIMEOUT_S = 300.0
KNATIVE_SERVINGS = "knativeservings.operator.knative.dev"
KNATIVE_SERVICES = "services.serving.knative.dev"
# Deleted first: no webhook configuration may outlive its server.
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# The labels a GPU node group of infra/ carries, so catalog predictors schedule here (infra's
# gpu_node_labels writes the GPU type as `gpu_label_value` spells it, lower case), and, the one
# node being the system node too, the label of infra's system node group, where infra's values
# place the add-ons' controllers (KServe's among them).
NODE_LABELS = {
    "radixfleet.io/gpu-type": "h100",
    "radixfleet.io/gpu-pool": "h100",
    "radixfleet.io/capacity-type": "on-demand",
    **SYSTEM_NODE_LABELS,
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


# Rendered by `radixfleet render` from the controllers' spec types (radixfleet/render/crds.py).
RADIXFLEET_CRDS = Path(__file__).resolve().parent.parent / "deploy" / "crds"


def install_radixfleet_crds(running: Cluster) -> None:
    """radixfleet's CRDs and kopf's peering CRD, established."""
    crds = [doc for path in sorted(RADIXFLEET_CRDS.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]  # fmt: skip
    _apply_crds(running, crds, field_manager="radixfleet")


def install_platform(running: Cluster) -> None:
    """What radixfleet needs of a cluster before anything of its own is deployed, as infra
    installs it: KServe and Knative Serving (``install_kserve``), with radixfleet's Knative
    features, and prometheus-operator with a Prometheus (``install_monitoring``). What a team's
    existing cluster brings; the README's kubectl path starts here."""
    from radixfleet.platform import KNATIVE_FEATURES

    install_kserve(running, knative_features=dict(KNATIVE_FEATURES))
    install_monitoring(running)


def install_monitoring(running: Cluster) -> None:
    """prometheus-operator, its CRDs and a Prometheus that serves every namespace's monitors and
    rules, as infra's kube-prometheus-stack installs them (``testbed.prometheus``); returns once
    Prometheus is ready."""
    built = prometheus.built_images()
    load_images(running, list(built.values()))
    _apply_crds(running, prometheus.crds())
    apply(
        running,
        prometheus.operator_objects(
            operator_image=built["operator"].pinned, reloader_image=built["reloader"].pinned
        ),
    )
    wait_rollout(running, namespace=prometheus.NAMESPACE, deployment=prometheus.OPERATOR)
    apply(running, prometheus.prometheus_objects(image=built["prometheus"].pinned))
    wait_for(lambda: prometheus_url(running) is not None, timeout_s=READY_TIMEOUT_S,
             what="the operator's Prometheus ready")  # fmt: skip


def prometheus_url(running: Cluster) -> str | None:
    """The URL of the ready Prometheus pod, reached from this machine (``prometheus-operated``
    is headless: in the cluster its name resolves to this pod), or None."""
    found = running.kubectl("get", "pod", f"{prometheus.STATEFULSET}-0", "-n",
                            prometheus.NAMESPACE, "-o", "json", check=False)  # fmt: skip
    if found.returncode != 0:
        return None
    pod = json.loads(found.stdout)
    if not is_ready(pod):
        return None
    return f"http://{pod['status']['podIP']}:{prometheus.PORT}"


def prometheus_api(running: Cluster, path: str, **params: str) -> Any:
    """The ``data`` of the platform's Prometheus' answer to ``GET /api/v1/<path>?<params>``."""
    base = prometheus_url(running)
    if base is None:
        raise ClusterError("the platform's Prometheus is not ready")
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())["data"]


def prometheus_query(running: Cluster, promql: str) -> list[dict[str, Any]]:
    """The platform's Prometheus' answer to an instant query (its result vector)."""
    result: list[dict[str, Any]] = prometheus_api(running, "query", query=promql)["result"]
    return result


def install_kserve(running: Cluster, *, knative_features: Mapping[str, str]) -> None:
    """Knative Serving 1.21.1 as infra installs it (the Knative operator's chart, then a
    KnativeServing; ``testbed.knative``), its config-features set to ``knative_features``,
    then KServe v0.20.0 from KServe's own charts with infra's values (``testbed.kserve``), its
    webhooks' certificates issued in cert-manager's stead (``testbed.certificates``): every
    program built here, ready to admit and reconcile. Knative's CRDs come first: KServe's
    manager checks for them only when it starts (and never watches Knative Services if they
    were late)."""
    built = _kserve_images() | _knative_images()
    load_images(running, list(built.values()))
    _install_knative(running, built, features=knative_features)
    _apply_crds(running, cert_manager_crds())
    references = {key: image.reference for key, image in built.items()}
    for release in kserve.releases(references):
        charts.install(release.chart, release.values, release=release.name,
                       namespace=kserve.NAMESPACE, kubeconfig=running.kubeconfig)  # fmt: skip
    certificates.issue(running, namespace=kserve.NAMESPACE)
    wait_knative_ready(running)
    wait_rollout(running, namespace=kserve.NAMESPACE, deployment=kserve.CONTROLLER)
    wait_for(lambda: _kserve_admits(running), timeout_s=READY_TIMEOUT_S,
             what="KServe's webhooks to answer")  # fmt: skip


# Enough of an InferenceService for KServe's webhooks to judge it.
_PROBE_ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
    "metadata": {"name": "webhook-probe", "namespace": "default"},
    "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"},
                                     "storageUri": "s3://probe/model"}}},
}  # fmt: skip


def _kserve_admits(running: Cluster) -> bool:
    """Whether KServe's webhooks answer (a server-side dry run reaches them and they judge).
    A rolled-out manager is not enough: on a loaded machine its Service's endpoints may not
    route yet, and the API server then fails every InferenceService it is asked to admit."""
    probe = running.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                            stdin=json.dumps(_PROBE_ISVC), check=False)  # fmt: skip
    return probe.returncode == 0 or "failed calling webhook" not in probe.stderr


def _install_knative(
    running: Cluster, built: Mapping[str, images.ImageRecord], *, features: Mapping[str, str]
) -> None:
    """The operator's chart, then the KnativeServing; returns once the operator has applied
    Serving's CRDs (what KServe needs next), not waiting for Serving to run."""
    values = knative.operator_values({key: built[key].reference for key in knative.image_keys()})
    charts.install(knative.operator_chart(), values, release=knative.OPERATOR_RELEASE,
                   namespace=knative.OPERATOR_NAMESPACE, kubeconfig=running.kubeconfig)  # fmt: skip
    serving = knative.knative_serving(
        {key: built[key].pinned for key in knative.image_keys()}, features=features
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": knative.NAMESPACE}}
    wait_established(running, [KNATIVE_SERVINGS])
    apply(running, [namespace, serving])
    wait_established(running, [KNATIVE_SERVICES])  # the operator applies them first


def wait_knative_ready(running: Cluster) -> None:
    """Until the KnativeServing is Ready: the operator has installed Serving and every one of
    its Deployments is available."""
    serving = f"{KNATIVE_SERVINGS}/{knative.NAMESPACE}"
    running.kubectl("wait", serving, "-n", knative.NAMESPACE, "--for=condition=Ready",
                    f"--timeout={KNATIVE_READY_TIMEOUT_S:.0f}s")  # fmt: skip
    for deployment in knative.DEPLOYMENTS:
        wait_rollout(running, namespace=knative.NAMESPACE, deployment=deployment)


def set_knative_features(running: Cluster, features: Mapping[str, str]) -> None:
    """Knative's config-features as exactly ``features`` (the release's defaults for the
    rest), through the KnativeServing as a platform team sets them (the operator owns the
    ConfigMap and puts back any edit of it); returns once the operator has written them."""
    patch = [{"op": "replace", "path": "/spec/config/features", "value": dict(features)}]
    running.kubectl("patch", KNATIVE_SERVINGS, knative.NAMESPACE, "-n", knative.NAMESPACE,
                    "--type=json", "-p", json.dumps(patch))  # fmt: skip
    wanted = knative.default_features() | dict(features)

    def written() -> bool:
        found = running.kubectl("get", "configmap", "config-features", "-n", knative.NAMESPACE,
                                "-o", "json")  # fmt: skip
        data = json.loads(found.stdout).get("data", {})
        return {k: v for k, v in data.items() if k != "_example"} == wanted

    wait_for(written, timeout_s=READY_TIMEOUT_S, what="the Knative operator to set the features")


def _apply_crds(
    running: Cluster, crds: Sequence[Mapping[str, Any]], *, field_manager: str = FIELD_MANAGER
) -> None:
    apply(running, crds, field_manager=field_manager)
    wait_established(running, [crd["metadata"]["name"] for crd in crds])


def cert_manager_crds() -> list[dict[str, Any]]:
    """cert-manager's CRDs, at the version of the chart infra installs: the charts' Certificate
    and Issuer are admitted as on a cluster that runs cert-manager."""
    folder = charts.cert_manager_crds().path()
    return [doc for path in sorted(folder.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]  # fmt: skip


def install_local_models(running: Cluster, *, host_path: Path) -> None:
    """KServe's local model controller and node agent (v0.20.0, built here) beside an installed
    KServe, from KServe's chart with infra's values: the agent on the nodes KServe's own
    selector picks, keeping models under ``host_path``, and the namespace of its download jobs
    (infra creates it beside the release). :func:`uninstall_local_models` removes it."""
    folder = ensure_built(KSERVE_LOCALMODEL)
    built = {
        key: images.go_binary_image(key, folder / binary, entrypoint=["/manager"], path="/manager")
        for key, binary in zip(kserve.LOCALMODEL_IMAGES, ("localmodel", "localmodelnode"),
                               strict=True)
    }  # fmt: skip
    load_images(running, list(built.values()))
    apply(running, [{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": kserve.LOCALMODEL_JOBS}}])  # fmt: skip
    release = kserve.local_model_release({key: i.reference for key, i in built.items()})
    charts.install(release.chart, release.values, release=release.name,
                   namespace=kserve.NAMESPACE, kubeconfig=running.kubeconfig,
                   post_renderer=kserve.post_render_argv(host_path))  # fmt: skip
    certificates.issue(running, namespace=kserve.NAMESPACE)
    wait_rollout(running, namespace=kserve.NAMESPACE, deployment=kserve.LOCALMODEL_CONTROLLER)


def uninstall_local_models(running: Cluster) -> None:
    """Remove what :func:`install_local_models` installed, webhook first (Helm's order)."""
    charts.uninstall(release=kserve.LOCALMODEL_RELEASE, namespace=kserve.NAMESPACE,
                     kubeconfig=running.kubeconfig)  # fmt: skip
    running.kubectl("delete", "namespace", kserve.LOCALMODEL_JOBS, "--ignore-not-found",
                    "--wait=true", "--timeout=120s", check=False)  # fmt: skip


def remove(running: Cluster, objects: Sequence[Mapping[str, Any]]) -> None:
    """Delete ``objects`` (webhook configurations first: none may outlive its server) and wait
    for them to go."""
    ordered = sorted(objects, key=lambda o: o["kind"] not in WEBHOOK_KINDS)
    documents = {"apiVersion": "v1", "kind": "List", "items": list(ordered)}
    running.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=120s",
                    stdin=json.dumps(documents), check=False)  # fmt: skip


def _kserve_images() -> dict[str, images.ImageRecord]:
    """KServe's manager, the kube-rbac-proxy its chart runs beside it, and its
    storage-initializer (which downloads what a local model cache holds onto the nodes)."""
    manager = images.go_binary_image(
        "kserve-manager", ensure_built(KSERVE) / "manager", entrypoint=["/manager"],
        path="/manager",
    )  # fmt: skip
    proxy = ensure_built(KUBE_RBAC_PROXY) / "kube-rbac-proxy"
    return {
        kserve.MANAGER: manager,
        kserve.RBAC_PROXY: images.go_binary_image(
            "kube-rbac-proxy", proxy, entrypoint=["/usr/local/bin/kube-rbac-proxy"]
        ),
        kserve.STORAGE_INITIALIZER: images.storage_initializer(),
    }


def _knative_images() -> dict[str, images.ImageRecord]:
    """One image per Knative program, its binary the entrypoint (Knative's Deployments, the
    queue-proxy sidecar and the operator's chart set no command); the operator's carries the
    release manifests it installs, where ko images carry them."""
    serving, operator = ensure_built(KNATIVE), ensure_built(KNATIVE_OPERATOR)
    built = {
        f"knative-{command}": _program_image(f"knative-{command}", serving / command)
        for command in knative.SERVING_COMMANDS
    }
    for command in knative.OPERATOR_COMMANDS:
        name = f"knative-operator-{command}"
        data = (knative.KO_DATA[0], knative.kodata().path()) if command == "operator" else None
        env = [knative.KO_DATA[1]] if data else []
        built[name] = _program_image(name, operator / command, data=data, env=env)
    return built


def _program_image(
    name: str, binary: Path, *, data: tuple[str, Path] | None = None, env: Sequence[str] = ()
) -> images.ImageRecord:
    entrypoint = [f"/usr/local/bin/{binary.name}"]
    return images.go_binary_image(name, binary, entrypoint=entrypoint, data=data, env=env)


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


def apply(
    running: Cluster, objects: Sequence[Mapping[str, Any]], *, field_manager: str = FIELD_MANAGER
) -> None:
    """Server-side apply, as a platform team's ``kubectl apply --server-side`` would."""
    documents = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    running.kubectl(
        "apply", "--server-side", f"--field-manager={field_manager}", "-f", "-",
        stdin=json.dumps(documents),
    )  # fmt: skip


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
        found = json.loads(result.stdout)
        items = found["items"] if found.get("kind") == "List" else [found]  # one asked: itself
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
