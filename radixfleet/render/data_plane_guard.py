"""The admission policy that keeps the data plane's key and labels on the data plane's own pods.

A tenant namespace holds two things a tenant's own pod must not get:

- the data plane's key, Secret `radixfleet-data-plane` (radixfleet.dataplane): a pod that
  mounts it calls the predictors and routers past the entry, unauthenticated and unmetered;
- the labels the namespace's NetworkPolicies let in by (radixfleet/render/inferenceservices.py):
  `app.kubernetes.io/component: router` and `serving.kserve.io/inferenceservice` reach the
  predictors.

Kubernetes guards neither: creating a pod needs no right to read the Secrets it mounts, and a
pod may carry any label. So this ValidatingAdmissionPolicy admits an object that carries the
key or the labels (a Pod, or anything that makes pods from a template) only from the accounts
that make the data plane's pods, each for the kind it makes:

    KServe               -> Knative Service, Deployment (a Standard-mode predictor's)
    Knative's controller -> Configuration, Revision, Deployment
    radixfleet operator  -> router Deployment (and the pool labels it moves on pods)
    deployment controller -> ReplicaSet;  replicaset controller -> Pod
    Knative's webhook    -> Pod (a server-side dry run, to validate a Knative Service)

Anyone else, a tenant bound to `edit` in its namespace included, is refused such a Pod,
ReplicaSet, Deployment, StatefulSet, DaemonSet, Job, CronJob, ReplicationController, Knative
Service, Configuration or Revision. An update by anyone else passes only if the pod template's
spec and those labels stay as they were: scaling, annotations and the garbage collector's edits
pass; a new image, an ephemeral container or a router label on a tenant's pod do not.

Why admission and not a namespace of the data plane's own: KServe runs a model's pods in its
InferenceService's namespace, so the key has to be there. What this does not cover, said in
tests/README.md: whoever may write an InferenceService or a ServingRuntime in the namespace
chooses the predictor's container, and is therefore inside the namespace's data plane (the
catalog's InferenceServices are the platform team's to apply), and `pods/exec` into a predictor
reads its environment (RBAC's to withhold: exec is a connection, not an object admission sees).

The CEL is generated here; `tests/test_data_plane_guard.py` evaluates it with cel-python against
`admits`, the same rule in Python, and `tests/cluster/test_data_plane.py` has the API server
enforce it while the data plane runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from radixfleet import dataplane, labels
from radixfleet.platform import KNATIVE_NAMESPACE, KSERVE_NAMESPACE
from radixfleet.render import operator

POLICY_PREFIX = "data-plane-guard"
# What tenant namespaces carry (radixfleet/render/inferenceservices.py: build_namespaces): the
# binding's selector. A namespace without it is not a tenant's, and the guard leaves it alone.
TENANT_NAMESPACES = {"matchExpressions": [{"key": labels.TENANT, "operator": "Exists"}]}

ROUTER_LABEL = (labels.COMPONENT, labels.ROUTER_COMPONENT)
PREDICTOR_LABEL = "serving.kserve.io/inferenceservice"


def _account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


# kube-controller-manager's own identity, for a cluster that runs it without
# `--use-service-account-credentials` (EKS and kubeadm run one account per controller).
CONTROLLER_MANAGER = "system:kube-controller-manager"
OPERATOR = _account(operator.NAMESPACE, operator.NAME)
KNATIVE = _account(KNATIVE_NAMESPACE, "controller")
KSERVE = _account(KSERVE_NAMESPACE, "kserve-controller-manager")

# Who may make (or change the template of) an object that carries the key or the labels, by
# the resource as kubectl names it. A resource not here has no maker: nobody may.
MAKERS: Mapping[str, tuple[str, ...]] = {
    # Knative's webhook (its controller's account) answers a dry-run update of a Knative Service
    # (KServe makes one every reconcile) by creating its pod in a server-side dry run.
    "pods": (
        _account("kube-system", "replicaset-controller"),
        CONTROLLER_MANAGER,
        OPERATOR,
        KNATIVE,
    ),
    "replicasets.apps": (_account("kube-system", "deployment-controller"), CONTROLLER_MANAGER),
    # KServe makes a Standard-mode predictor's Deployments itself (its head's and its workers').
    "deployments.apps": (OPERATOR, KNATIVE, KSERVE),
    "services.serving.knative.dev": (KSERVE,),
    "configurations.serving.knative.dev": (KNATIVE,),
    "revisions.serving.knative.dev": (KNATIVE,),
}


@dataclass(frozen=True)
class Shape:
    """Where a kind keeps the pod it makes: `template` is the dotted path, from the object, of
    something with the pod's `metadata` and `spec` ('' for the object itself)."""

    name: str
    template: str
    resources: Mapping[str, tuple[str, ...]]  # API group -> resources


SHAPES = (
    # A Revision holds its pod's spec and labels as a Pod does.
    Shape("pods", "", {"": ("pods", "pods/ephemeralcontainers"),
                       "serving.knative.dev": ("revisions",)}),
    Shape("templates", "spec.template", {
        "": ("replicationcontrollers",),
        "apps": ("deployments", "replicasets", "statefulsets", "daemonsets"),
        "batch": ("jobs",),
        "serving.knative.dev": ("services", "configurations"),
    }),
    Shape("cronjobs", "spec.jobTemplate.spec.template", {"batch": ("cronjobs",)}),
)  # fmt: skip


# ---- the rule in Python: what the CEL below spells --------------------------------------------


def admits(
    resource: str, operation: str, user: str, new: Mapping[str, Any], old: Mapping[str, Any] | None
) -> bool:
    """Whether the guard admits `user`'s `operation` (CREATE or UPDATE) of `new` (`old` before an
    update), `resource` as kubectl names it (`deployments.apps`)."""
    template = _shape_of(resource).template
    now = _pod_of(new, template)
    before = _pod_of(old, template) if operation == "UPDATE" and old is not None else None
    if not carries(*now) and (before is None or not carries(*before)):
        return True
    if user in MAKERS.get(resource, ()):
        return True
    return before is not None and before[1] == now[1] and _marks(before[0]) == _marks(now[0])


def carries(pod_labels: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether a pod with these labels and spec carries the data plane's labels or key."""
    router = pod_labels.get(ROUTER_LABEL[0]) == ROUTER_LABEL[1]
    return router or PREDICTOR_LABEL in pod_labels or _mounts_key(spec)


def _shape_of(resource: str) -> Shape:
    name, _, group = resource.partition(".")
    for shape in SHAPES:
        if name in shape.resources.get(group, ()):
            return shape
    raise ValueError(f"{resource}: not a resource the data-plane guard matches")


def _pod_of(obj: Mapping[str, Any], template: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The (labels, spec) of the pod an object makes."""
    pod: Any = obj
    for field in template.split(".") if template else ():
        pod = pod.get(field) or {}
    return (pod.get("metadata") or {}).get("labels") or {}, pod.get("spec") or {}


def _marks(pod_labels: Mapping[str, Any]) -> tuple[Any, Any]:
    return pod_labels.get(ROUTER_LABEL[0], ""), pod_labels.get(PREDICTOR_LABEL, "")


def _mounts_key(spec: Mapping[str, Any]) -> bool:
    containers = [c for kind in CONTAINER_LISTS for c in spec.get(kind) or []]
    return any(_container_reads_key(c) for c in containers) or any(
        _volume_holds_key(v) for v in spec.get("volumes") or []
    )


CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _container_reads_key(container: Mapping[str, Any]) -> bool:
    from_env = any(
        ((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") == dataplane.SECRET
        for e in container.get("env") or []
    )
    from_all = any(
        (f.get("secretRef") or {}).get("name") == dataplane.SECRET
        for f in container.get("envFrom") or []
    )
    return from_env or from_all


def _volume_holds_key(volume: Mapping[str, Any]) -> bool:
    if (volume.get("secret") or {}).get("secretName") == dataplane.SECRET:
        return True
    sources = (volume.get("projected") or {}).get("sources") or []
    return any((s.get("secret") or {}).get("name") == dataplane.SECRET for s in sources)


# ---- the same rule in CEL ---------------------------------------------------------------------


def _guarded(path: str) -> str:
    """`has()` for every field of a dotted path after its root."""
    root, *fields = path.split(".")
    return " && ".join(f"has({'.'.join([root, *fields[: i + 1]])})" for i in range(len(fields)))


def _or_empty(path: str, *, when: str = "") -> str:
    """`path` where it is set (and `when` holds), else an empty map. An update's oldObject is
    never null, a create's always is: `when` says which, not a test of null."""
    present = " && ".join(p for p in (when, _guarded(path)) if p)
    return f"{present} ? {path} : {{}}"


def _under(root: str, template: str, field: str) -> str:
    return ".".join(p for p in (root, template, field) if p)


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _has_name(path: str, field: str) -> str:
    return f"{_guarded(f'{path}.{field}')} && {path}.{field} == {_lit(dataplane.SECRET)}"


def _carries_cel(pod_labels: str, spec: str) -> str:
    """CEL for `carries` over two variables holding the labels and the spec."""
    reads = (
        f"(has(c.env) && c.env.exists(e, {_has_name('e', 'valueFrom.secretKeyRef.name')}))"
        f" || (has(c.envFrom) && c.envFrom.exists(f, {_has_name('f', 'secretRef.name')}))"
    )
    containers = [f"(has({spec}.{k}) && {spec}.{k}.exists(c, {reads}))" for k in CONTAINER_LISTS]
    volume = (
        f"({_has_name('v', 'secret.secretName')}) || (has(v.projected) && has(v.projected.sources)"
        f" && v.projected.sources.exists(p, {_has_name('p', 'secret.name')}))"
    )
    key, value = ROUTER_LABEL
    return " || ".join([
        f"({_lit(key)} in {pod_labels} && {pod_labels}[{_lit(key)}] == {_lit(value)})",
        f"{_lit(PREDICTOR_LABEL)} in {pod_labels}",
        *containers,
        f"(has({spec}.volumes) && {spec}.volumes.exists(v, {volume}))",
    ])  # fmt: skip


def _marks_cel(pod_labels: str) -> str:
    return (
        "["
        + ", ".join(
            f"{_lit(k)} in {pod_labels} ? {pod_labels}[{_lit(k)}] : ''"
            for k in (ROUTER_LABEL[0], PREDICTOR_LABEL)
        )
        + "]"
    )


def _makers_cel() -> str:
    entries = ", ".join(
        f"{_lit(resource)}: [{', '.join(_lit(u) for u in users)}]"
        for resource, users in MAKERS.items()
    )
    return "{" + entries + "}"


def variables(shape: Shape) -> list[tuple[str, str]]:
    """The policy's variables, in the order the API server may evaluate them."""
    new_pod, old_pod = _under("object", shape.template, ""), _under("oldObject", shape.template, "")
    update = "request.operation == 'UPDATE'"
    return [
        ("resource", "request.resource.resource"
                     " + (request.resource.group == '' ? '' : '.' + request.resource.group)"),
        ("labels", _or_empty(_under(new_pod, "metadata", "labels"))),
        ("spec", _or_empty(_under(new_pod, "", "spec"))),
        ("oldLabels", _or_empty(_under(old_pod, "metadata", "labels"), when=update)),
        ("oldSpec", _or_empty(_under(old_pod, "", "spec"), when=update)),
        ("carries", _carries_cel("variables.labels", "variables.spec")),
        ("carried", f"{update} && ({_carries_cel('variables.oldLabels', 'variables.oldSpec')})"),
        ("makers", _makers_cel()),
        ("maker", "variables.resource in variables.makers"
                  " && request.userInfo.username in variables.makers[variables.resource]"),
        ("unchanged", f"{update} && variables.spec == variables.oldSpec && "
                      f"{_marks_cel('variables.labels')} == {_marks_cel('variables.oldLabels')}"),
    ]  # fmt: skip


VERDICT = "!(variables.carries || variables.carried) || variables.maker || variables.unchanged"
MESSAGE = (
    "variables.resource + ' ' + request.namespace + '/' + request.name + ': '"
    ' + request.userInfo.username + " may not make or change a pod that carries the data'
    f" plane's key (Secret {dataplane.SECRET}) or its router or predictor label; only the data"
    " plane's controllers may (radixfleet/render/data_plane_guard.py)\""
)


def policy(shape: Shape) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy for one shape of object."""
    rules = [
        {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
         "resources": list(resources)}
        for group, resources in shape.resources.items()
    ]  # fmt: skip
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": _name(shape), "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {
            # An error in CEL refuses: a guard that fails open guards nothing.
            "failurePolicy": "Fail",
            "matchConstraints": {"namespaceSelector": TENANT_NAMESPACES, "resourceRules": rules},
            "variables": [{"name": n, "expression": e} for n, e in variables(shape)],
            "validations": [
                {"expression": VERDICT, "messageExpression": MESSAGE, "reason": "Forbidden"}
            ],
        },
    }


def binding(shape: Shape) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": _name(shape), "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {
            "policyName": _name(shape),
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": TENANT_NAMESPACES},
        },
    }


def _name(shape: Shape) -> str:
    return f"{POLICY_PREFIX}-{shape.name}.{labels.GROUP}"


def manifests() -> list[dict[str, Any]]:
    """Every policy and its binding: what `inferenceservices/data-plane-guard.yaml` holds and
    infra applies in each region."""
    return [obj for shape in SHAPES for obj in (policy(shape), binding(shape))]
