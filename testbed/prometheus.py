"""Prometheus in the test cluster: Debian's server as a pod, scraping what radixfleet's
PodMonitors select, the way prometheus-operator would configure it.

No prometheus-operator runs here (it would be one more Go build for a translation this module
does in sixty lines), so :func:`scrape_config` turns each PodMonitor endpoint into the scrape
job prometheus-operator generates for it: pod discovery in the selected namespaces, `keep` rules
for the label selector and the port, the target labels `namespace`, `pod`, `container` and
`job`, then the PodMonitor's own relabelings. The Service is named as kube-prometheus-stack
names it (`prometheus-operated` in `monitoring`), so the controllers' default URL finds it.

Discovery is the one shim: Debian builds Prometheus without Kubernetes service discovery, so a
sidecar (testbed/pod_discovery.py, run from the ConfigMap) answers `http_sd_configs` with the
targets and `__meta_kubernetes_pod_*` labels of `kubernetes_sd_configs` (role pod).
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from radixfleet.render.monitoring import pod_monitors
from testbed import images, pod_discovery

Manifest = dict[str, Any]

NAMESPACE = "monitoring"
NAME = "prometheus-operated"
PORT = 9090
CONFIG_FILE = "prometheus.yml"
DISCOVERY_FILE = "pod_discovery.py"
NONROOT = 65532
RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "action": "action",
    "regex": "regex",
    "replacement": "replacement",
    "separator": "separator",
    "modulus": "modulus",
}


class UnsupportedMonitorError(ValueError):
    """A PodMonitor uses a selector or field this translation does not model."""


def image() -> images.ImageRecord:
    """Debian's prometheus binary on the test bed's base image (it links only libc)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise images.ImageError("prometheus: Debian's `prometheus` is not installed (provision)")
    return images.go_binary_image(
        "prometheus", Path(binary), entrypoint=["/usr/local/bin/prometheus"]
    )


def _selector_rules(selector: Mapping[str, Any]) -> list[Manifest]:
    rules = []
    for key, value in selector.get("matchLabels", {}).items():
        meta = pod_discovery.sanitized(key)
        rules.append(_keep([f"pod_label_{meta}", f"pod_labelpresent_{meta}"], f"({value});true"))
    for expression in selector.get("matchExpressions", []):
        meta, operator = pod_discovery.sanitized(expression["key"]), expression["operator"]
        if operator == "Exists":
            rules.append(_keep([f"pod_labelpresent_{meta}"], "true"))
        elif operator == "In":
            values = "|".join(expression["values"])
            rules.append(
                _keep([f"pod_label_{meta}", f"pod_labelpresent_{meta}"], f"({values});true")
            )
        else:
            raise UnsupportedMonitorError(f"selector operator {operator!r}")
    return rules


def _keep(metas: Sequence[str], regex: str) -> Manifest:
    labels = [f"__meta_kubernetes_{meta}" for meta in metas]
    return {"action": "keep", "source_labels": labels, "regex": regex}


def _relabeling(rule: Mapping[str, Any]) -> Manifest:
    unknown = set(rule) - set(RELABEL_KEYS)
    if unknown:
        raise UnsupportedMonitorError(f"relabeling fields {sorted(unknown)}")
    return {RELABEL_KEYS[key]: value for key, value in rule.items()}


def _target_labels(job: str) -> list[Manifest]:
    copy = {"namespace": "namespace", "pod": "pod_name", "container": "pod_container_name"}
    rules: list[Manifest] = [
        {"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label}
        for label, meta in copy.items()
    ]
    return [*rules, {"target_label": "job", "replacement": job}]


def scrape_config(
    monitor: Mapping[str, Any], index: int, *, interval: str | None = None
) -> Manifest:
    """The scrape job of endpoint `index` of a PodMonitor; `interval` overrides the monitor's."""
    meta, spec = monitor["metadata"], monitor["spec"]
    endpoint = spec["podMetricsEndpoints"][index]
    every = interval or endpoint.get("interval", "30s")
    namespaces = spec.get("namespaceSelector", {})
    names = [] if namespaces.get("any") else namespaces.get("matchNames") or [meta["namespace"]]
    query = urllib.parse.urlencode([("namespace", name) for name in names])
    url = f"http://127.0.0.1:{pod_discovery.PORT}/targets" + (f"?{query}" if query else "")
    rules = _selector_rules(spec.get("selector", {}))
    if "port" in endpoint:
        rules.append(_keep(["pod_container_port_name"], endpoint["port"]))
    rules += _target_labels(f"{meta['namespace']}/{meta['name']}")
    rules += [_relabeling(rule) for rule in endpoint.get("relabelings", [])]
    return {
        "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{index}",
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": every,
        "http_sd_configs": [{"url": url, "refresh_interval": every}],
        "relabel_configs": rules,
    }


def config(monitors: Sequence[Mapping[str, Any]], *, interval: str) -> Manifest:
    """prometheus.yml for every endpoint of every monitor."""
    jobs = [
        scrape_config(monitor, index, interval=interval)
        for monitor in monitors
        for index in range(len(monitor["spec"]["podMetricsEndpoints"]))
    ]
    return {"global": {"scrape_interval": interval}, "scrape_configs": jobs}


def objects(
    monitors: Sequence[Mapping[str, Any]],
    *,
    image_ref: str,
    discovery_image_ref: str,
    interval: str = "2s",
) -> list[Manifest]:
    """Prometheus' namespace, identity (read pods cluster-wide), config, Deployment, Service.
    `discovery_image_ref` is any image with python3 (the sidecar's script is in the ConfigMap)."""
    meta = {"name": NAME, "namespace": NAMESPACE}
    data = {
        CONFIG_FILE: json.dumps(config(monitors, interval=interval), indent=1),
        DISCOVERY_FILE: Path(pod_discovery.__file__).read_text(),
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        _cluster_role(),
        _cluster_role_binding(),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data},
        _deployment(image_ref, discovery_image_ref),
        _service(),
    ]


def for_radixfleet(*, server: images.ImageRecord, radixfleet: images.ImageRecord) -> list[Manifest]:
    """:func:`objects` for radixfleet's own PodMonitors (`deploy/monitoring/`), as a platform
    team's prometheus-operator would scrape them: `server` is :func:`image`, and radixfleet's
    image runs the discovery sidecar (it has python3)."""
    return objects(pod_monitors(), image_ref=server.pinned, discovery_image_ref=radixfleet.pinned)


def _cluster_role() -> Manifest:
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"testbed-{NAME}"},
        "rules": [rule],
    }


def _cluster_role_binding() -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"testbed-{NAME}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"testbed-{NAME}",
        },
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }


def _locked_down() -> Manifest:
    return {
        "runAsNonRoot": True,
        "runAsUser": NONROOT,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def _deployment(image_ref: str, discovery_image_ref: str) -> Manifest:
    selector = {"app.kubernetes.io/name": NAME}
    server = {
        "name": "prometheus",
        "image": image_ref,
        "args": [
            f"--config.file=/etc/prometheus/{CONFIG_FILE}",
            "--storage.tsdb.path=/prometheus",
            "--storage.tsdb.retention.time=2h",
            f"--web.listen-address=:{PORT}",
        ],
        "ports": [{"name": "web", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "web"}, "periodSeconds": 2},
        "securityContext": _locked_down(),
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/prometheus"},
            {"name": "data", "mountPath": "/prometheus"},
        ],
    }
    discovery = {
        "name": "pod-discovery",
        "image": discovery_image_ref,
        "command": ["python3", f"/etc/prometheus/{DISCOVERY_FILE}"],
        "securityContext": _locked_down(),
        "volumeMounts": [{"name": "config", "mountPath": "/etc/prometheus"}],
    }
    pod = {
        "serviceAccountName": NAME,
        "containers": [server, discovery],
        "volumes": [
            {"name": "config", "configMap": {"name": NAME}},
            {"name": "data", "emptyDir": {}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": selector},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": pod},
        },
    }


def _service() -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "selector": {"app.kubernetes.io/name": NAME},
            "ports": [{"name": "web", "port": PORT, "targetPort": "web"}],
        },
    }
