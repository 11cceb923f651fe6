"""The data-plane guard's CEL says what `data_plane_guard.admits` says, evaluated by cel-python.

The API server enforces the policy (tests/cluster/test_data_plane.py, with the data plane
running under it); here its CEL runs in cel-python on the same inputs as the rule in Python,
variables evaluated in order as the API server does, over every shape it matches. A CEL error
counts as a refusal, as `failurePolicy: Fail` makes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import celpy
import pytest
from celpy import celtypes
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet import dataplane, labels
from radixfleet.render import data_plane_guard as guard

ENV = celpy.Environment()
PROGRAMS = {
    shape.name: [(n, ENV.program(ENV.compile(e))) for n, e in guard.variables(shape)]
    for shape in guard.SHAPES
}
VERDICT = ENV.program(ENV.compile(guard.VERDICT))
MESSAGE = ENV.program(ENV.compile(guard.MESSAGE))

TENANT = "alice"  # a person bound to `edit` in the tenant's namespace
REPLICASETS = guard.MAKERS["pods"][0]
DEPLOYMENTS = guard.MAKERS["replicasets.apps"][0]
ROUTER = {labels.COMPONENT: labels.ROUTER_COMPONENT}
PREDICTOR = {guard.PREDICTOR_LABEL: "chat"}

# Every resource the guard matches, as kubectl names it, with its shape.
RESOURCES = {
    (name if not group else f"{name}.{group}"): shape
    for shape in guard.SHAPES
    for group, names in shape.resources.items()
    for name in names
    if "/" not in name
}


def _request(resource: str, operation: str, user: str) -> dict[str, Any]:
    name, _, group = resource.partition(".")
    return {
        "operation": operation,
        "resource": {"group": group, "version": "v1", "resource": name},
        "userInfo": {"username": user},
        "namespace": "team-search",
        "name": "made",
    }


def cel_admits(
    resource: str, operation: str, user: str, new: Mapping[str, Any], old: Mapping[str, Any] | None
) -> bool:
    """The policy's verdict; False when CEL fails (the API server then refuses)."""
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(dict(new)),
        "oldObject": celpy.json_to_cel(dict(old) if old is not None else None),
        "request": celpy.json_to_cel(_request(resource, operation, user)),
    }
    variables: dict[celtypes.StringType, Any] = {}
    for name, program in PROGRAMS[RESOURCES[resource].name]:
        # The API server evaluates a variable when it is used: keep an error as a value.
        try:
            value = program.evaluate({**activation, "variables": celtypes.MapType(variables)})
        except celpy.CELEvalError as error:
            value = error
        variables[celtypes.StringType(name)] = value
    scope = {**activation, "variables": celtypes.MapType(variables)}
    try:
        return bool(VERDICT.evaluate(scope))
    except celpy.CELEvalError:
        return False


# ---- objects of every shape ---------------------------------------------------------------


def pod(
    pod_labels: Mapping[str, str] | None = None, *, key: str | None = None, image: str = "app:1"
) -> dict[str, Any]:
    """A pod's metadata and spec; `key` names where it reads the data plane's key, if it does."""
    container: dict[str, Any] = {"name": "app", "image": image}
    spec: dict[str, Any] = {"containers": [container]}
    ref = {"name": dataplane.SECRET}
    if key == "env":
        container["env"] = [{"name": "K", "valueFrom": {"secretKeyRef": {**ref, "key": "api-key"}}}]
    elif key == "envFrom":
        container["envFrom"] = [{"secretRef": ref}]
    elif key == "volume":
        spec["volumes"] = [{"name": "k", "secret": {"secretName": dataplane.SECRET}}]
    elif key == "projected":
        spec["volumes"] = [{"name": "k", "projected": {"sources": [{"secret": ref}]}}]
    elif key in ("initContainers", "ephemeralContainers"):
        spec[key] = [{"name": "x", "image": "x", "envFrom": [{"secretRef": ref}]}]
    return {"metadata": {"labels": dict(pod_labels or {})}, "spec": spec}


def made(resource: str, template: Mapping[str, Any], **spec: Any) -> dict[str, Any]:
    """An object of `resource` whose pods are `template` (`spec` adds to a template's holder)."""
    shape = RESOURCES[resource]
    obj: dict[str, Any] = {"metadata": {"name": "made", "labels": {"owner": "x"}}}
    if not shape.template:
        return {**obj, "metadata": {**obj["metadata"], **template["metadata"]},
                "spec": template["spec"]}  # fmt: skip
    holder: dict[str, Any] = obj
    for field in shape.template.split(".")[:-1]:
        holder = holder.setdefault(field, {})
    holder[shape.template.split(".")[-1]] = template
    obj["spec"].update(spec)
    return obj


# ---- the cases a reader checks first --------------------------------------------------------

CASES = [
    # (id, resource, operation, user, new, old, admitted)
    ("a tenant's plain pod", "pods", "CREATE", TENANT, pod(), None, True),
    ("a tenant's pod labelled as a router", "pods", "CREATE", TENANT, pod(ROUTER), None, False),
    ("a tenant's pod labelled as a predictor", "pods", "CREATE", TENANT, pod(PREDICTOR), None,
     False),
    *[(f"a tenant's pod with the key in {where}", "pods", "CREATE", TENANT, pod(key=where), None,
       False) for where in ("env", "envFrom", "volume", "projected", "initContainers")],
    ("the replicaset controller's router pod", "pods", "CREATE", REPLICASETS,
     pod(ROUTER, key="env"), None, True),
    ("Knative's webhook dry-runs a predictor pod", "pods", "CREATE", guard.KNATIVE,
     pod(PREDICTOR, key="env"), None, True),
    ("the operator moves a predictor pod to the warming pool", "pods", "UPDATE", guard.OPERATOR,
     pod({**PREDICTOR, labels.POOL: "warming"}), pod(PREDICTOR), True),
    ("a tenant annotates a router pod", "pods", "UPDATE", TENANT,
     {**pod(ROUTER, key="env"), "metadata": {"labels": ROUTER, "annotations": {"a": "b"}}},
     pod(ROUTER, key="env"), True),
    ("a tenant sets a predictor pod's image", "pods", "UPDATE", TENANT,
     pod(PREDICTOR, key="env", image="evil:1"), pod(PREDICTOR, key="env"), False),
    ("a tenant adds an ephemeral container to a predictor", "pods", "UPDATE", TENANT,
     pod(PREDICTOR, key="ephemeralContainers"), pod(PREDICTOR), False),
    ("a tenant labels its own pod as a router", "pods", "UPDATE", TENANT, pod(ROUTER), pod(),
     False),
    ("a tenant's Deployment of routers", "deployments.apps", "CREATE", TENANT,
     made("deployments.apps", pod(ROUTER)), None, False),
    ("the operator's Deployment of routers", "deployments.apps", "CREATE", guard.OPERATOR,
     made("deployments.apps", pod(ROUTER, key="env")), None, True),
    ("Knative's Deployment of a predictor", "deployments.apps", "CREATE", guard.KNATIVE,
     made("deployments.apps", pod(PREDICTOR, key="env")), None, True),
    ("KServe's Deployment of a Standard-mode head", "deployments.apps", "CREATE", guard.KSERVE,
     made("deployments.apps", pod(PREDICTOR, key="env")), None, True),
    ("a tenant scales a router Deployment", "deployments.apps", "UPDATE", TENANT,
     made("deployments.apps", pod(ROUTER, key="env"), replicas=3),
     made("deployments.apps", pod(ROUTER, key="env"), replicas=1), True),
    ("a tenant sets a router Deployment's image", "deployments.apps", "UPDATE", TENANT,
     made("deployments.apps", pod(ROUTER, key="env", image="evil:1")),
     made("deployments.apps", pod(ROUTER, key="env")), False),
    ("the deployment controller's ReplicaSet", "replicasets.apps", "CREATE", DEPLOYMENTS,
     made("replicasets.apps", pod(PREDICTOR, key="env")), None, True),
    ("a tenant's ReplicaSet with the key", "replicasets.apps", "CREATE", TENANT,
     made("replicasets.apps", pod(key="volume")), None, False),
    ("a tenant's StatefulSet with the key", "statefulsets.apps", "CREATE", TENANT,
     made("statefulsets.apps", pod(key="env")), None, False),
    ("the operator's DaemonSet of routers: nobody makes one", "daemonsets.apps", "CREATE",
     guard.OPERATOR, made("daemonsets.apps", pod(ROUTER)), None, False),
    ("a tenant's Job with the key", "jobs.batch", "CREATE", TENANT,
     made("jobs.batch", pod(key="envFrom")), None, False),
    ("a tenant's CronJob with the key", "cronjobs.batch", "CREATE", TENANT,
     made("cronjobs.batch", pod(key="projected")), None, False),
    ("a tenant's plain CronJob", "cronjobs.batch", "CREATE", TENANT,
     made("cronjobs.batch", pod()), None, True),
    ("a tenant's Knative Service labelled as a predictor", "services.serving.knative.dev",
     "CREATE", TENANT, made("services.serving.knative.dev", pod(PREDICTOR)), None, False),
    ("KServe's Knative Service", "services.serving.knative.dev", "CREATE", guard.KSERVE,
     made("services.serving.knative.dev", pod(PREDICTOR, key="env")), None, True),
    ("KServe's Configuration: only Knative makes one", "configurations.serving.knative.dev",
     "CREATE", guard.KSERVE, made("configurations.serving.knative.dev", pod(PREDICTOR)), None,
     False),
    ("Knative's Revision", "revisions.serving.knative.dev", "CREATE", guard.KNATIVE,
     made("revisions.serving.knative.dev", pod(PREDICTOR, key="env")), None, True),
    ("a tenant's Revision with the key", "revisions.serving.knative.dev", "CREATE", TENANT,
     made("revisions.serving.knative.dev", pod(key="env")), None, False),
    ("a ReplicationController without a template", "replicationcontrollers", "CREATE", TENANT,
     {"metadata": {"name": "rc"}, "spec": {"replicas": 0}}, None, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("resource", "operation", "user", "new", "old", "admitted"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_who_may_make_the_data_planes_pods(
    resource: str,
    operation: str,
    user: str,
    new: dict[str, Any],
    old: dict[str, Any] | None,
    admitted: bool,
) -> None:
    assert guard.admits(resource, operation, user, new, old) is admitted
    assert cel_admits(resource, operation, user, new, old) is admitted


def test_a_refusal_names_the_object_the_account_and_the_secret() -> None:
    activation = {
        "request": celpy.json_to_cel(_request("deployments.apps", "CREATE", TENANT)),
        "variables": celtypes.MapType({celtypes.StringType("resource"): "deployments.apps"}),
    }
    message = str(MESSAGE.evaluate(activation))
    assert message.startswith(f"deployments.apps team-search/made: {TENANT} may not make")
    assert dataplane.SECRET in message


# ---- the CEL and the Python agree everywhere ------------------------------------------------

USERS = st.sampled_from(
    [TENANT, REPLICASETS, DEPLOYMENTS, guard.OPERATOR, guard.KNATIVE, guard.KSERVE,
     guard.CONTROLLER_MANAGER]
)  # fmt: skip
POD_LABELS = st.dictionaries(
    st.sampled_from([labels.COMPONENT, guard.PREDICTOR_LABEL, labels.POOL, "app"]),
    st.sampled_from([labels.ROUTER_COMPONENT, "chat", "warming", "web"]),
    max_size=3,
)
KEYS = st.sampled_from(
    [None, "env", "envFrom", "volume", "projected", "initContainers", "ephemeralContainers"]
)
PODS = st.builds(pod, POD_LABELS, key=KEYS, image=st.sampled_from(["app:1", "evil:1"]))


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, str, dict[str, Any], dict[str, Any] | None]:
    resource = draw(st.sampled_from(sorted(RESOURCES)))
    operation = draw(st.sampled_from(["CREATE", "UPDATE"]))
    new = made(resource, draw(PODS), replicas=draw(st.integers(0, 2)))
    old = made(resource, draw(PODS)) if operation == "UPDATE" else None
    if old is not None and draw(st.booleans()):
        old = new  # an update that leaves the template alone (a scale, an annotation)
    return resource, operation, draw(USERS), new, old


@settings(max_examples=400, deadline=None)
@given(requests())
def test_the_cel_says_what_the_python_says(
    request: tuple[str, str, str, dict[str, Any], dict[str, Any] | None],
) -> None:
    assert cel_admits(*request) is guard.admits(*request)


def test_every_policy_binds_only_tenant_namespaces() -> None:
    for obj in guard.manifests():
        spec = obj["spec"]
        selector = spec.get("matchConstraints", spec.get("matchResources"))["namespaceSelector"]
        assert selector == {"matchExpressions": [
            {"key": labels.TENANT, "operator": "Exists"}]}, obj["metadata"]["name"]  # fmt: skip


def test_every_maker_is_a_resource_the_guard_matches() -> None:
    assert set(guard.MAKERS) <= set(RESOURCES)
