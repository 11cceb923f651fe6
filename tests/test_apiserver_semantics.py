"""What a real API server does with an InferenceService that mocks do not: KServe's schema
refuses bad fields with its own message, unknown fields are pruned (or refused when strict),
defaults are filled in, status moves only through the status subresource, a stale write gets 409
Conflict, server-side apply reports field-manager conflicts, and a watch resumes from a
resourceVersion. Controllers rely on each of these; here they meet the real machinery.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.exceptions import ApiException

from tests.apiserver.fixture import ApiServer

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"

pytestmark = pytest.mark.apiserver


Obj = dict[str, Any]


def _obj(value: object) -> Obj:
    # The client returns custom objects as decoded JSON, typed only as `object`.
    assert isinstance(value, dict)
    return value


@dataclass(frozen=True)
class Isvcs:
    """InferenceServices of one namespace, through the kubernetes client's custom-objects API."""

    api: client.CustomObjectsApi
    namespace: str

    def _at(self) -> tuple[str, str, str, str]:
        return GROUP, VERSION, self.namespace, PLURAL

    def create(self, body: Obj, **kw: Any) -> Obj:
        return _obj(self.api.create_namespaced_custom_object(*self._at(), body, **kw))

    def get(self, name: str) -> Obj:
        return _obj(self.api.get_namespaced_custom_object(*self._at(), name))

    def replace(self, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        return _obj(self.api.replace_namespaced_custom_object(*self._at(), name, body))

    def replace_status(self, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        return _obj(self.api.replace_namespaced_custom_object_status(*self._at(), name, body))

    def apply(self, body: Obj, *, manager: str, force: bool = False) -> Obj:
        name = body["metadata"]["name"]
        # Raw response: the client decodes only 200, and an apply that creates answers 201.
        response = self.api.patch_namespaced_custom_object(
            *self._at(), name, body, field_manager=manager, force=force,
            _content_type="application/apply-patch+yaml", _preload_content=False,
        )  # fmt: skip
        return _obj(json.loads(response.data))  # type: ignore[attr-defined]

    def resource_version(self) -> str:
        listed = _obj(self.api.list_namespaced_custom_object(*self._at()))
        version: str = listed["metadata"]["resourceVersion"]
        return version

    def watch(self, *, since: str, seconds: int) -> Iterator[Obj]:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            self.api.list_namespaced_custom_object, *self._at(),
            resource_version=since, timeout_seconds=seconds,
        )  # fmt: skip
        for event in stream:
            yield _obj(event)


@pytest.fixture
def isvcs(kube_client: Any) -> Isvcs:
    # A fresh namespace per test keeps tests apart in the shared session server; it needs no
    # Namespace object, which this server does not serve.
    return Isvcs(client.CustomObjectsApi(kube_client), f"t-{uuid.uuid4().hex[:10]}")


def isvc(name: str, **predictor: Any) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "predictor": {
                "minReplicas": 0,
                "model": {
                    "modelFormat": {"name": "sglang"},
                    "runtime": "sglang",
                    "storageUri": "s3://models/llama-3-8b",
                },
                **predictor,
            }
        },
    }


def rejection(error: ApiException) -> str:
    message: str = json.loads(error.body or "{}").get("message", "")
    return message


def test_kserve_schema_refuses_an_unsupported_value(isvcs: Isvcs) -> None:
    with pytest.raises(ApiException) as refused:
        isvcs.create(isvc("bad-metric", scaleMetric="gpu"))
    assert refused.value.status == 422
    # The allowed values come from KServe's CRD, not from anything of ours.
    assert 'spec.predictor.scaleMetric: Unsupported value: "gpu"' in rejection(refused.value)
    assert '"cpu", "memory", "concurrency", "rps"' in rejection(refused.value)


def test_kubectl_server_dry_run_reports_kserve_message(apiserver: ApiServer, isvcs: Isvcs) -> None:
    body = isvc("bad-metric", scaleMetric="gpu")
    result = apiserver.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", isvcs.namespace, "-f", "-",
        stdin=json.dumps(body), check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert 'Unsupported value: "gpu"' in result.stderr


def test_unknown_field_is_refused_when_strict_and_pruned_otherwise(isvcs: Isvcs) -> None:
    with pytest.raises(ApiException) as refused:
        isvcs.create(isvc("typo", gpuCount=1), field_validation="Strict")
    assert refused.value.status == 400  # BadRequest: refused while decoding, before validation
    assert 'unknown field "spec.predictor.gpuCount"' in rejection(refused.value)

    isvcs.create(isvc("typo", gpuCount=1), field_validation="Ignore")
    assert "gpuCount" not in isvcs.get("typo")["spec"]["predictor"]


def test_schema_defaults_are_filled_in(isvcs: Isvcs) -> None:
    container = {"name": "kserve-container", "image": "sglang", "ports": [{"containerPort": 8080}]}
    isvcs.create(isvc("defaults", containers=[container]))
    stored = isvcs.get("defaults")["spec"]["predictor"]["containers"][0]
    assert stored["ports"][0]["protocol"] == "TCP"


def test_status_changes_only_through_the_status_subresource(isvcs: Isvcs) -> None:
    created = isvcs.create(isvc("status"))
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "url": "http://status.example"}
    updated = isvcs.replace_status({**created, "status": ready})
    assert updated["status"] == ready
    # Writing status did not touch the spec, so the generation stays.
    assert updated["metadata"]["generation"] == created["metadata"]["generation"]

    updated["status"] = {"url": "http://ignored.example"}
    updated["spec"]["predictor"]["maxReplicas"] = 3
    after = isvcs.replace(updated)
    assert after["status"] == ready  # the main endpoint ignores status
    assert after["metadata"]["generation"] == created["metadata"]["generation"] + 1


def test_a_stale_update_gets_409_conflict(isvcs: Isvcs) -> None:
    isvcs.create(isvc("stale"))
    first, second = isvcs.get("stale"), isvcs.get("stale")
    first["spec"]["predictor"]["maxReplicas"] = 2
    isvcs.replace(first)

    second["spec"]["predictor"]["maxReplicas"] = 4  # written from an out-of-date read
    with pytest.raises(ApiException) as conflict:
        isvcs.replace(second)
    assert conflict.value.status == 409
    assert isvcs.get("stale")["spec"]["predictor"]["maxReplicas"] == 2


def test_server_side_apply_reports_a_field_manager_conflict(isvcs: Isvcs) -> None:
    isvcs.apply(isvc("ssa", canaryTrafficPercent=10), manager="radixfleet-canary")
    with pytest.raises(ApiException) as conflict:
        isvcs.apply(isvc("ssa", canaryTrafficPercent=50), manager="someone-else")
    assert conflict.value.status == 409
    assert "canaryTrafficPercent" in rejection(conflict.value)

    forced = isvcs.apply(isvc("ssa", canaryTrafficPercent=50), manager="someone-else", force=True)
    assert forced["spec"]["predictor"]["canaryTrafficPercent"] == 50


def test_a_watch_resumes_from_a_resource_version(isvcs: Isvcs) -> None:
    isvcs.create(isvc("before"))
    since = isvcs.resource_version()
    isvcs.create(isvc("after-1"))
    isvcs.create(isvc("after-2"))
    seen = []
    for event in isvcs.watch(since=since, seconds=10):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 2:
            break
    # Only what happened after the resourceVersion, in order; "before" is not replayed.
    assert seen == [("ADDED", "after-1"), ("ADDED", "after-2")]


def test_discovery_lists_the_custom_resources(apiserver: ApiServer, kube_client: Any) -> None:
    # kubectl and kopf find resources through /api and /apis, which this server only serves
    # because our main adds them (the aggregator in front of it serves them in a cluster).
    resources = apiserver.kubectl("api-resources", "--api-group", GROUP, "-o", "name").stdout
    assert f"{PLURAL}.{GROUP}" in resources.split()
    discovered = dynamic.DynamicClient(kube_client).resources.get(  # type: ignore[no-untyped-call]
        api_version=f"{GROUP}/{VERSION}", kind="InferenceService"
    )
    assert (discovered.name, discovered.namespaced) == (PLURAL, True)
