"""What the test bed installs for Prometheus (testbed/prometheus.py): prometheus-operator's own
manifests moved to `monitoring` and pointed at the images built here, a Prometheus that selects
what infra's kube-prometheus-stack values select, and radixfleet's PodMonitors at the test
bed's interval. In the cluster, tests/cluster/test_operator.py reads the series it scrapes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra import manifests
from radixfleet.render.monitoring import pod_monitors
from testbed import prometheus

OPERATOR_IMAGE = "localhost/radixfleet/prometheus-operator@sha256:" + "1" * 64
RELOADER_IMAGE = "localhost/radixfleet/prometheus-config-reloader@sha256:" + "2" * 64
SERVER_IMAGE = "localhost/radixfleet/prometheus@sha256:" + "3" * 64


@pytest.fixture(scope="module")
def installed() -> list[dict[str, Any]]:
    return [
        *prometheus.operator_objects(operator_image=OPERATOR_IMAGE, reloader_image=RELOADER_IMAGE),
        *prometheus.prometheus_objects(image=SERVER_IMAGE),
    ]


def test_every_object_is_in_monitoring_and_so_are_the_bindings_subjects(
    installed: list[dict[str, Any]],
) -> None:
    namespaced = [o for o in installed if o["kind"] not in (*prometheus.CLUSTER_KINDS, "Namespace")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {prometheus.NAMESPACE}
    subjects = [s for o in installed for s in o.get("subjects", [])]
    assert subjects and {s["namespace"] for s in subjects} == {prometheus.NAMESPACE}
    kinds = sorted(o["kind"] for o in installed)
    assert kinds.count("ServiceAccount") == 2 and "ServiceMonitor" not in kinds


def test_only_images_built_here_run(installed: list[dict[str, Any]]) -> None:
    (deployment,) = [o for o in installed if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == OPERATOR_IMAGE
    reloaders = [a for a in container["args"] if a.startswith("--prometheus-config-reloader=")]
    assert reloaders == [f"--prometheus-config-reloader={RELOADER_IMAGE}"]
    (server,) = [o for o in installed if o["kind"] == "Prometheus"]
    assert server["spec"]["image"] == SERVER_IMAGE
    assert "quay.io" not in json.dumps(installed), "no registry can be reached here"


def test_the_prometheus_selects_every_monitor_and_rule_as_infras_values_do(
    installed: list[dict[str, Any]],
) -> None:
    (server,) = [o for o in installed if o["kind"] == "Prometheus"]
    spec = server["spec"]
    for kind in ("podMonitor", "serviceMonitor", "rule"):
        assert spec[f"{kind}Selector"] == {} and spec[f"{kind}NamespaceSelector"] == {}, kind
    values = manifests.prometheus_stack_values(admin_secret="a", storage_class="b")
    chart_spec = values["prometheus"]["prometheusSpec"]
    assert chart_spec["podMonitorSelectorNilUsesHelmValues"] is False
    assert spec["retention"] == chart_spec["retention"]
    assert server["metadata"]["name"] == prometheus.PROMETHEUS


def test_the_crds_are_the_releases_and_read_a_bare_equals_sign_as_text() -> None:
    crds = prometheus.crds()
    names = {crd["metadata"]["name"] for crd in crds}
    for kind in ("podmonitors", "servicemonitors", "prometheusrules", "prometheuses"):
        assert f"{kind}.monitoring.coreos.com" in names
    # A matcher's operators, `- =` in the YAML: plain PyYAML fails on the bare `=`.
    assert '["!=", "=", "=~", "!~"]' in json.dumps(crds)


def test_fast_monitors_change_only_each_endpoints_interval() -> None:
    monitors = pod_monitors()
    before = copy.deepcopy(monitors)
    fast = prometheus.fast_pod_monitors(monitors)
    assert monitors == before, "the caller's monitors are not changed"
    intervals = {e["interval"] for m in fast for e in m["spec"]["podMetricsEndpoints"]}
    assert intervals == {prometheus.FAST_INTERVAL}
    for monitor in fast:
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            del endpoint["interval"]
    for monitor in before:
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            endpoint.pop("interval", None)
    assert fast == before
