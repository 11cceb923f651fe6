"""The autoscaler against a real Kubernetes API server (tests/apiserver) with the Knative CRDs.

The AutoscalePolicy CRD's defaults and CEL rule, its status written and read back through the
subresource, and the scale bounds patched onto a real Knative Revision, whose generation must
not move (annotations are not spec: no new revision, nothing for Knative to roll). The
PodAutoscaler kind is not served here, which is the 404 `set_scale` tolerates. Pods are core
objects this server does not serve, so they go to a fake.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from canary.fakes import FakeEvents
from policies.autoscale.controller import Controller
from policies.autoscale.fakes import FakePods
from policies.autoscale.knative import MAX_SCALE, MIN_SCALE
from policies.autoscale.kube import KubeAutoscalePolicies, KubeInferenceServices, KubeRevisions
from policies.autoscale.spec import AutoscalePolicySpec
from policies.autoscale.state import Verb, status_of
from radixfleet.adapters.prometheus_fake import FakePrometheus
from tests.autoscale.test_controller import answers, gauges

pytestmark = pytest.mark.apiserver

OURS = ("radixfleet.io", "v1alpha1", "autoscalepolicies")
KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")
KNATIVE = ("serving.knative.dev", "v1", "revisions")
REV = "llama-predictor-00001"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def ns() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def api(kube_client: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


def _read(api: client.CustomObjectsApi, kind: tuple[str, str, str], ns: str, name: str) -> Any:
    return api.get_namespaced_custom_object(kind[0], kind[1], ns, kind[2], name)


def _policy(api: client.CustomObjectsApi, ns: str, spec: dict[str, Any]) -> Any:
    body = {"apiVersion": "radixfleet.io/v1alpha1", "kind": "AutoscalePolicy",
            "metadata": {"name": "llama"}, "spec": spec}  # fmt: skip
    return api.create_namespaced_custom_object(*OURS[:2], ns, OURS[2], body)


def _world(api: client.CustomObjectsApi, ns: str) -> None:
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "llama"},
        "spec": {"predictor": {"minReplicas": 0, "maxReplicas": 6, "model": {
            "modelFormat": {"name": "sglang"}, "runtime": "sglang", "storageUri": "s3://m/l"}}},
    }  # fmt: skip
    api.create_namespaced_custom_object(*KSERVE[:2], ns, KSERVE[2], isvc)
    predictor = {"latestReadyRevision": REV, "latestRolledoutRevision": REV}
    status = {"status": {"components": {"predictor": predictor}}}
    api.patch_namespaced_custom_object_status(*KSERVE[:2], ns, KSERVE[2], "llama", status)
    revision = {
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": REV, "annotations": {MIN_SCALE: "2", MAX_SCALE: "2"}},
        "spec": {"containers": [{"image": "sglang"}]},
    }  # fmt: skip
    api.create_namespaced_custom_object(*KNATIVE[:2], ns, KNATIVE[2], revision)
    counts = {"status": {"actualReplicas": 2, "desiredReplicas": 2}}
    api.patch_namespaced_custom_object_status(*KNATIVE[:2], ns, KNATIVE[2], REV, counts)


def test_crd_defaults_fill_in_and_match_the_type(api: client.CustomObjectsApi, ns: str) -> None:
    created = _policy(api, ns, {"inferenceService": "llama"})
    assert AutoscalePolicySpec.model_validate(created["spec"]) == AutoscalePolicySpec(
        inference_service="llama"
    )
    assert created["spec"]["scaleDown"]["stabilizationSeconds"] == 300


def test_crd_refuses_min_above_max(api: client.CustomObjectsApi, ns: str) -> None:
    with pytest.raises(ApiException) as refused:
        _policy(api, ns, {"inferenceService": "llama", "minReplicas": 5, "maxReplicas": 2})
    assert refused.value.status == 422
    assert "minReplicas must not be above maxReplicas" in str(refused.value.body)


def test_a_tick_on_real_objects(kube_client: Any, api: client.CustomObjectsApi, ns: str) -> None:
    _world(api, ns)
    _policy(api, ns, {"inferenceService": "llama"})
    prometheus = FakePrometheus()
    controller = Controller(
        isvcs=KubeInferenceServices(kube_client),
        revisions=KubeRevisions(kube_client),
        pods=FakePods(),
        policies=KubeAutoscalePolicies(kube_client),
        events=FakeEvents(),
        prometheus=prometheus,
    )
    prometheus.answers = answers({"pod-0": gauges(0.95), "pod-1": gauges(0.95)}, namespace=ns)
    before = _read(api, KNATIVE, ns, REV)
    body = _read(api, OURS, ns, "llama")
    decision = controller.reconcile_policy(body, now=T0)
    assert decision is not None and (decision.verb, decision.desired) == (Verb.SCALE_UP, 3)
    after = _read(api, KNATIVE, ns, REV)
    assert after["metadata"]["annotations"][MIN_SCALE] == "3"
    assert after["metadata"]["annotations"][MAX_SCALE] == "3"
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    stored = _read(api, OURS, ns, "llama")
    status = status_of(stored)
    assert status is not None and status.desired == 3 and status.revision == REV
    assert status == decision.status
