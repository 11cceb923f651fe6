"""What a real API server does that fakes do not, on the test cluster: KServe's schema refuses bad
fields with its own message, unknown fields are pruned (or refused when strict), defaults are
filled in, status moves only through the status subresource, a stale write gets 409 Conflict,
server-side apply reports field-manager conflicts, and a watch resumes from a resourceVersion.
Controllers rely on each of these; here they meet the real machinery.

KServe runs on this cluster and reconciles every InferenceService it sees, writing its status
(which moves the resourceVersion at moments a test does not choose). So InferenceServices are
judged by server-side dry runs, or kept to what KServe leaves alone (a spec field's manager);
the status, 409 and watch rules are shown on radixfleet's own CanaryPolicy, which nothing
reconciles here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.exceptions import ApiException

from testbed.cluster import Cluster

KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")
OURS = ("radixfleet.io", "v1alpha1", "canarypolicies")


Obj = dict[str, Any]


def _obj(value: object) -> Obj:
    # The client returns custom objects as decoded JSON, typed only as `object`.
    assert isinstance(value, dict)
    return value


@dataclass(frozen=True)
class Objects:
    """Custom objects of one kind in one namespace, through the kubernetes client."""

    api: client.CustomObjectsApi
    kind: tuple[str, str, str]
    namespace: str

    def _at(self) -> tuple[str, str, str, str]:
        group, version, plural = self.kind
        return group, version, self.namespace, plural

    def create(self, body: Obj, **kw: Any) -> Obj:
        return _obj(self.api.create_namespaced_custom_object(*self._at(), body, **kw))

    def dry_run(self, body: Obj, **kw: Any) -> Obj:
        """What a create would store (after defaulting, pruning and every admission check)."""
        return self.create(body, dry_run="All", **kw)

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
def isvcs(kserve: Cluster, kube_client: Any, namespace: str) -> Objects:
    return Objects(client.CustomObjectsApi(kube_client), KSERVE, namespace)


@pytest.fixture
def policies(kube_client: Any, namespace: str) -> Objects:
    return Objects(client.CustomObjectsApi(kube_client), OURS, namespace)


def isvc(name: str, **predictor: Any) -> Obj:
    # Standard mode and a runtime that is not installed: KServe accepts it and deploys nothing.
    return {
        "apiVersion": "/".join(KSERVE[:2]),
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {
            "predictor": {
                "minReplicas": 0,
                "model": {
                    "modelFormat": {"name": "sglang"},
                    "runtime": "not-installed",
                    "storageUri": "s3://models/llama-3-8b",
                },
                **predictor,
            }
        },
    }


def policy(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "/".join(OURS[:2]), "kind": "CanaryPolicy",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def rejection(error: ApiException) -> str:
    message: str = json.loads(error.body or "{}").get("message", "")
    return message


def test_kserve_schema_refuses_an_unsupported_value(isvcs: Objects) -> None:
    with pytest.raises(ApiException) as refused:
        isvcs.dry_run(isvc("bad-metric", scaleMetric="gpu"))
    assert refused.value.status == 422
    # The allowed values come from KServe's CRD, not from anything of ours.
    assert 'spec.predictor.scaleMetric: Unsupported value: "gpu"' in rejection(refused.value)
    assert '"cpu", "memory", "concurrency", "rps"' in rejection(refused.value)


def test_kubectl_server_dry_run_reports_kserve_message(kserve: Cluster, isvcs: Objects) -> None:
    body = isvc("bad-metric", scaleMetric="gpu")
    result = kserve.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", isvcs.namespace, "-f", "-",
        stdin=json.dumps(body), check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert 'Unsupported value: "gpu"' in result.stderr


def test_unknown_field_is_refused_when_strict_and_pruned_otherwise(isvcs: Objects) -> None:
    with pytest.raises(ApiException) as refused:
        isvcs.dry_run(isvc("typo", gpuCount=1), field_validation="Strict")
    assert refused.value.status == 400  # BadRequest: refused while decoding, before validation
    assert 'unknown field "spec.predictor.gpuCount"' in rejection(refused.value)

    stored = isvcs.dry_run(isvc("typo", gpuCount=1), field_validation="Ignore")
    assert "gpuCount" not in stored["spec"]["predictor"]


def test_schema_defaults_are_filled_in(isvcs: Objects) -> None:
    container = {"name": "kserve-container", "image": "sglang", "ports": [{"containerPort": 8080}]}
    body = isvc("defaults", containers=[container])
    del body["spec"]["predictor"]["model"]
    stored = isvcs.dry_run(body)["spec"]["predictor"]["containers"][0]
    assert stored["ports"][0]["protocol"] == "TCP"


def test_status_changes_only_through_the_status_subresource(policies: Objects) -> None:
    created = policies.create(policy("status"))
    ready = {"activeRollouts": 1, "rollouts": []}
    updated = policies.replace_status({**created, "status": ready})
    assert updated["status"] == ready
    # Writing status did not touch the spec, so the generation stays.
    assert updated["metadata"]["generation"] == created["metadata"]["generation"]

    updated["status"] = {"activeRollouts": 7}
    updated["spec"]["intervalSeconds"] = 30
    after = policies.replace(updated)
    assert after["status"] == ready  # the main endpoint ignores status
    assert after["metadata"]["generation"] == created["metadata"]["generation"] + 1


def test_a_stale_update_gets_409_conflict(policies: Objects) -> None:
    policies.create(policy("stale"))
    first, second = policies.get("stale"), policies.get("stale")
    first["spec"]["intervalSeconds"] = 20
    policies.replace(first)

    second["spec"]["intervalSeconds"] = 40  # written from an out-of-date read
    with pytest.raises(ApiException) as conflict:
        policies.replace(second)
    assert conflict.value.status == 409
    assert policies.get("stale")["spec"]["intervalSeconds"] == 20


def test_server_side_apply_reports_a_field_manager_conflict(isvcs: Objects) -> None:
    isvcs.apply(isvc("ssa", canaryTrafficPercent=10), manager="radixfleet-canary")
    with pytest.raises(ApiException) as conflict:
        isvcs.apply(isvc("ssa", canaryTrafficPercent=50), manager="someone-else")
    assert conflict.value.status == 409
    assert "canaryTrafficPercent" in rejection(conflict.value)

    forced = isvcs.apply(isvc("ssa", canaryTrafficPercent=50), manager="someone-else", force=True)
    assert forced["spec"]["predictor"]["canaryTrafficPercent"] == 50


def test_a_watch_resumes_from_a_resource_version(policies: Objects) -> None:
    policies.create(policy("before"))
    since = policies.resource_version()
    policies.create(policy("after-1"))
    policies.create(policy("after-2"))
    seen = []
    for event in policies.watch(since=since, seconds=10):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 2:
            break
    # Only what happened after the resourceVersion, in order; "before" is not replayed.
    assert seen == [("ADDED", "after-1"), ("ADDED", "after-2")]


@pytest.mark.parametrize(("kind", "name"), [(KSERVE, "InferenceService"), (OURS, "CanaryPolicy")],
                         ids=["kserve", "radixfleet"])  # fmt: skip
def test_discovery_lists_the_custom_resources(
    kserve: Cluster, kube_client: Any, kind: tuple[str, str, str], name: str
) -> None:
    # kubectl and kopf find resources through /api and /apis (kopf, and our RBAC rules, by
    # plural names).
    group, version, plural = kind
    resources = kserve.kubectl("api-resources", "--api-group", group, "-o", "name").stdout
    assert f"{plural}.{group}" in resources.split()
    discovered = dynamic.DynamicClient(kube_client).resources.get(  # type: ignore[no-untyped-call]
        api_version=f"{group}/{version}", kind=name
    )
    assert (discovered.name, discovered.namespaced) == (plural, True)
