"""The test bed's translation of radixfleet's PodMonitors into Prometheus scrape jobs
(testbed/prometheus.py): accepted by the real `promtool`, and keeping what prometheus-operator
keeps. In the cluster, tests/cluster/test_operator.py checks the labels on scraped series."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from radixfleet.render.monitoring import pod_monitors, sglang_predictors
from testbed import pod_discovery, prometheus


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus not installed")
def test_promtool_accepts_the_configuration_of_every_monitor(tmp_path: Path) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(prometheus.config(pod_monitors(), interval="2s")))
    result = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _keeps(job: dict[str, Any]) -> dict[tuple[str, ...], str]:
    return {
        tuple(rule["source_labels"]): rule["regex"]
        for rule in job["relabel_configs"]
        if rule.get("action") == "keep"
    }


def test_the_predictor_job_keeps_predictor_pods_and_their_sglang_container() -> None:
    job = prometheus.scrape_config(sglang_predictors(), 0)
    keeps = _keeps(job)
    assert (
        keeps[
            (
                "__meta_kubernetes_pod_label_component",
                "__meta_kubernetes_pod_labelpresent_component",
            )
        ]
        == "(predictor);true"
    )
    assert keeps[("__meta_kubernetes_pod_labelpresent_serving_kserve_io_inferenceservice",)] == (
        "true"
    )
    assert keeps[("__meta_kubernetes_pod_container_name",)] == "kserve-container"
    (discovery,) = job["http_sd_configs"]
    assert discovery["url"].endswith("/targets")  # every namespace
    targets = [rule.get("target_label") for rule in job["relabel_configs"]]
    for label in ("namespace", "pod", "container", "job", "revision", "model", "tenant"):
        assert label in targets


def test_a_monitor_of_one_namespace_and_port_discovers_only_there() -> None:
    monitor = {
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {"selector": {}, "podMetricsEndpoints": [{"port": "metrics"}]},
    }
    job = prometheus.scrape_config(monitor, 0, interval="5s")
    (discovery,) = job["http_sd_configs"]
    assert discovery["url"].endswith("/targets?namespace=ns")
    assert _keeps(job) == {("__meta_kubernetes_pod_container_port_name",): "metrics"}
    assert job["scrape_interval"] == "5s" and job["job_name"] == "podMonitor/ns/m/0"


@pytest.mark.parametrize(
    ("selector", "endpoint", "what"),
    [
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]},
            {},
            "NotIn",
            id="unsupported-operator",
        ),
        pytest.param({}, {"relabelings": [{"foo": 1}]}, "foo", id="unknown-relabeling-field"),
    ],
)
def test_what_the_translation_does_not_model_is_refused(
    selector: dict[str, Any], endpoint: dict[str, Any], what: str
) -> None:
    monitor = {"metadata": {"name": "m", "namespace": "ns"},
               "spec": {"selector": selector, "podMetricsEndpoints": [endpoint]}}  # fmt: skip
    with pytest.raises(prometheus.UnsupportedMonitorError, match=what):
        prometheus.scrape_config(monitor, 0)


POD = {
    "metadata": {"name": "p", "namespace": "ns", "labels": {"serving.knative.dev/revision": "r1"}},
    "spec": {
        "containers": [
            {"name": "kserve-container", "ports": [{"name": "user-port", "containerPort": 8080}]},
            {"name": "queue-proxy", "ports": [{"containerPort": 8012}, {"containerPort": 9091}]},
            {"name": "no-ports"},
        ]
    },
    "status": {"podIP": "10.0.0.7", "phase": "Running"},
}


def test_pod_discovery_gives_one_target_per_declared_port_with_kubernetes_sd_labels() -> None:
    groups = pod_discovery.targets([POD, {**POD, "status": {"phase": "Pending"}}])
    assert [g["targets"] for g in groups] == [
        ["10.0.0.7:8080"],
        ["10.0.0.7:8012"],
        ["10.0.0.7:9091"],
    ]
    labels = groups[0]["labels"]
    assert labels["__meta_kubernetes_pod_label_serving_knative_dev_revision"] == "r1"
    assert labels["__meta_kubernetes_pod_labelpresent_serving_knative_dev_revision"] == "true"
    assert labels["__meta_kubernetes_pod_container_name"] == "kserve-container"
    assert labels["__meta_kubernetes_pod_container_port_name"] == "user-port"
    assert labels["__meta_kubernetes_namespace"] == "ns"
    assert labels["__meta_kubernetes_pod_name"] == "p"
