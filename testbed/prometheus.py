"""Prometheus in the test cluster, installed the way infra's kube-prometheus-stack installs it:
prometheus-operator v0.82.2 (the chart's release) with its CRDs, and one ``Prometheus`` that
selects every PodMonitor, ServiceMonitor and PrometheusRule in every namespace (infra's values
set each ``*SelectorNilUsesHelmValues`` to false). The operator turns radixfleet's PodMonitors
into scrape jobs with Kubernetes pod discovery and its rules into rule files; Prometheus is
served as ``prometheus-operated.monitoring``, the Service the operator makes, which the
controllers' default URL names.

What differs from the chart, each for a reason of this machine (``tests/README.md``):

- the operator's own manifests from its module (``example/rbac/``), moved to ``monitoring``: the
  chart cannot be downloaded here. No admission webhook (the chart's needs kube-webhook-certgen),
  Alertmanager, Grafana, node-exporter or kube-state-metrics: nothing under test reads them;
- every program is built here (``testbed.builds.PROMETHEUS_OPERATOR``), Prometheus 3.5.0 with
  Kubernetes discovery alone;
- the TSDB is an emptyDir (the test cluster has no storage class) and no placement on system
  nodes (one node).

Deciding what to install is pure; :func:`install` installs it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra import manifests
from radixfleet.render.monitoring import pod_monitors
from testbed import images
from testbed.builds import PROMETHEUS_OPERATOR
from testbed.charts import ModuleChart
from testbed.gobuild import ensure_built

Manifest = dict[str, Any]

HERE = Path(__file__).resolve().parent
MODULE = "github.com/prometheus-operator/prometheus-operator"
GO_MOD = HERE / "prometheus-operator" / "go.mod"
NAMESPACE = manifests.MONITORING_NAMESPACE
OPERATOR = "prometheus-operator"
# The Prometheus object, named as kube-prometheus-stack names its own for infra's release; the
# operator runs it as the StatefulSet `prometheus-<name>` behind the Service `prometheus-operated`.
PROMETHEUS = "kube-prometheus-stack-prometheus"
STATEFULSET = f"prometheus-{PROMETHEUS}"
NAME = "prometheus-operated"
PORT = 9090
SERVICE_ACCOUNT = "prometheus"
# Where the operator runs the config reloader from (it sets the container's command).
RELOADER_PATH = "/usr/bin/prometheus-config-reloader"
# Scrapes in the test bed: often enough that a test sees a canary's numbers in seconds.
FAST_INTERVAL = "2s"


def server_version() -> str:
    """The Prometheus release built here, from its module's version in our go.mod (module tags
    are v0.3MM.P for release 3.MM.P: ``v0.305.0`` is ``v3.5.0``)."""
    module = ModuleChart("github.com/prometheus/prometheus", GO_MOD, ".").version()
    _, minor, patch = module.removeprefix("v").split(".")
    return f"v3.{int(minor) - 300}.{patch}"


def example() -> Path:
    """The operator module's ``example/`` folder (CRDs and RBAC manifests)."""
    return ModuleChart(MODULE, GO_MOD, "example").path()


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1's safe loader, reading a plain ``=`` as the string it is: the CRDs list it among
    matcher operators, and PyYAML resolves it to a "value" tag it has no constructor for."""


def _as_text(loader: _CrdLoader, node: yaml.Node) -> str:
    return str(node.value)


_CrdLoader.add_constructor("tag:yaml.org,2002:value", _as_text)


def crds() -> list[Manifest]:
    """Every CRD of the release, as the chart installs them."""
    folder = example() / "prometheus-operator-crd"
    return [doc for path in sorted(folder.glob("*.yaml"))
            for doc in yaml.load_all(path.read_text(), Loader=_CrdLoader) if doc]  # fmt: skip


CLUSTER_KINDS = ("ClusterRole", "ClusterRoleBinding")


def _in_monitoring(objects: list[Manifest]) -> list[Manifest]:
    """The example's objects in ``monitoring`` (they name ``default``, or no namespace), and so
    are their bindings' subjects."""
    for obj in objects:
        if obj["kind"] not in CLUSTER_KINDS:
            obj["metadata"]["namespace"] = NAMESPACE
        for subject in obj.get("subjects", []):
            subject["namespace"] = NAMESPACE
    return objects


def _example_objects(folder: str) -> list[Manifest]:
    path = example() / "rbac" / folder
    return [doc for file in sorted(path.glob("*.yaml"))
            for doc in yaml.safe_load_all(file.read_text()) if doc]  # fmt: skip


def operator_objects(*, operator_image: str, reloader_image: str) -> list[Manifest]:
    """The operator's namespace, identity, ClusterRole, Deployment and Service, as its module
    ships them, running the images built here (by digest)."""
    kept = [doc for doc in _example_objects("prometheus-operator")
            if doc["kind"] != "ServiceMonitor"]  # fmt: skip
    for doc in kept:
        if doc["kind"] == "Deployment":
            _point_at(doc, operator_image=operator_image, reloader_image=reloader_image)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    return [namespace, *_in_monitoring(kept)]


def _point_at(deployment: Manifest, *, operator_image: str, reloader_image: str) -> None:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["image"] = operator_image
    container["args"] = [
        f"--prometheus-config-reloader={reloader_image}"
        if arg.startswith("--prometheus-config-reloader=") else arg
        for arg in container["args"]
    ]  # fmt: skip


def prometheus_objects(*, image: str) -> list[Manifest]:
    """Prometheus' identity (the module's example ClusterRole: pods, services, endpoints) and
    the ``Prometheus`` infra's values make, running ``image``."""
    identity = [doc for doc in _example_objects("prometheus") if doc["kind"] != "Prometheus"]
    return [*_in_monitoring(identity), prometheus(image=image)]


def prometheus(*, image: str) -> Manifest:
    """The ``Prometheus`` that infra's kube-prometheus-stack values describe: every monitor and
    rule of every namespace, infra's retention."""
    values = manifests.prometheus_stack_values(admin_secret="", storage_class="")
    spec = values["prometheus"]["prometheusSpec"]
    everything: Manifest = {}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": PROMETHEUS, "namespace": NAMESPACE},
        "spec": {
            "image": image,
            "version": server_version(),
            "replicas": 1,
            "serviceAccountName": SERVICE_ACCOUNT,
            "retention": spec["retention"],
            **{key: everything for key in _SELECTORS},
        },
    }


# What `*SelectorNilUsesHelmValues: false` makes the chart write: an empty selector, all of them.
_SELECTORS = (
    "podMonitorSelector", "podMonitorNamespaceSelector",
    "serviceMonitorSelector", "serviceMonitorNamespaceSelector",
    "ruleSelector", "ruleNamespaceSelector",
)  # fmt: skip


def built_images() -> dict[str, images.ImageRecord]:
    """The operator's, its config reloader's and Prometheus' images, built here."""
    folder = ensure_built(PROMETHEUS_OPERATOR)
    return {
        "operator": images.go_binary_image(
            "prometheus-operator", folder / "operator", entrypoint=["/usr/local/bin/operator"]
        ),
        "reloader": images.go_binary_image(
            "prometheus-config-reloader",
            folder / "prometheus-config-reloader",
            entrypoint=[RELOADER_PATH],
            path=RELOADER_PATH,
        ),
        "prometheus": images.go_binary_image(
            "prometheus", folder / "prometheus", entrypoint=["/usr/local/bin/prometheus"]
        ),
    }


def fast_pod_monitors(monitors: Sequence[Mapping[str, Any]] | None = None) -> list[Manifest]:
    """radixfleet's PodMonitors (``deploy/monitoring/``) scraping every ``FAST_INTERVAL``: what
    the test bed applies where a test reads Prometheus (the operator keeps each endpoint's own
    interval, and 15 s would make every canary test wait minutes)."""
    fast = [copy.deepcopy(dict(monitor)) for monitor in (monitors or pod_monitors())]
    for monitor in fast:
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            endpoint["interval"] = FAST_INTERVAL
    return fast
