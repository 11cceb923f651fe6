"""What a cluster's admission does with a set of manifests: KServe's and Knative's webhooks.

The schema checks judge one object at a time; a cluster also judges objects together. A second
runtime may collide with the first, and an InferenceService becomes a pod only once KServe has
merged it with its runtime, and Knative (in Knative mode) or Kubernetes (in Standard mode)
judges that pod. `check_set` runs those rules over every document given at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from radixfleet.validate import knative_rules, kserve_rules
from radixfleet.validate.podview import Doc, PodView, get, predictor_pod, runtime_pod, worker_pod

Problem = tuple[Doc, str, str]
# Env KServe gives a multi-node replica's containers (kserve v0.20.0,
# pkg/controller/v1beta1/inferenceservice/components/predictor.go): args may refer to these.
HEAD_ENV = frozenset(
    {
        "PIPELINE_PARALLEL_SIZE",
        "TENSOR_PARALLEL_SIZE",
        "RAY_NODE_COUNT",
        "REQUEST_GPU_COUNT",
        "MODEL_NAME",
        "MODEL_DIR",
    }
)
WORKER_ENV = frozenset(
    {
        "PIPELINE_PARALLEL_SIZE",
        "TENSOR_PARALLEL_SIZE",
        "RAY_NODE_COUNT",
        "REQUEST_GPU_COUNT",
        "ISVC_NAME",
        "HEAD_SVC",
        "WORKER_SVC",
    }
)
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
DIST_INIT_ADDR = "--dist-init-addr"


def check_set(docs: Sequence[Doc], features: Mapping[str, str]) -> Iterator[Problem]:
    """Every refusal KServe's and Knative's webhooks would give these documents together."""
    yield from kserve_rules.check_runtimes(docs)
    for doc in docs:
        kind = doc.body.get("kind")
        if kind in kserve_rules.RUNTIME_KINDS:
            yield from _runtime(doc, features)
        elif kind == "InferenceService":
            yield from kserve_rules.check_inference_service(doc)
            yield from _predictor(doc, _runtime_of(doc, docs), features)


def _runtime(runtime: Doc, features: Mapping[str, str]) -> Iterator[Problem]:
    head = runtime_pod(runtime)
    yield from _missing_volumes(head)
    if get(runtime, "spec.workerSpec") is None:
        # A single-node runtime serves Knative-mode predictors: its pod must pass Knative.
        yield from _knative(head, features)
        yield from _env_refs(runtime, "spec.containers", frozenset())
        return
    yield from _missing_volumes(runtime_pod(runtime, "spec.workerSpec"))
    yield from _env_refs(runtime, "spec.containers", HEAD_ENV)
    yield from _env_refs(runtime, "spec.workerSpec.containers", WORKER_ENV)
    yield from _rendezvous(runtime)


def _predictor(isvc: Doc, runtime: Doc | None, features: Mapping[str, str]) -> Iterator[Problem]:
    if runtime is not None:
        yield from _runtime_fits(isvc, runtime)
    if kserve_rules.is_knative(isvc):
        yield from _knative(predictor_pod(isvc, runtime), features)
        return
    yield from _missing_volumes(predictor_pod(isvc, runtime))
    if get(isvc, "spec.predictor.workerSpec") is not None:
        yield from _missing_volumes(worker_pod(isvc, runtime))


def _runtime_of(isvc: Doc, docs: Sequence[Doc]) -> Doc | None:
    """The runtime KServe would use: a ServingRuntime of the namespace, else a cluster one."""
    name = get(isvc, "spec.predictor.model.runtime")
    namespace = get(isvc, "metadata.namespace")
    candidates = [d for d in docs if get(d, "metadata.name") == name]
    for kind, ns in (("ServingRuntime", namespace), ("ClusterServingRuntime", None)):
        for doc in candidates:
            if doc.body.get("kind") == kind and get(doc, "metadata.namespace") == ns:
                return doc
    return None


def _runtime_fits(isvc: Doc, runtime: Doc) -> Iterator[Problem]:
    """KServe's controller refuses a named runtime that cannot serve the model."""
    wanted = str(get(isvc, "spec.predictor.model.modelFormat.name") or "").lower()
    formats = get(runtime, "spec.supportedModelFormats") or []
    if wanted and not any(str(f.get("name", "")).lower() == wanted for f in formats):
        yield (
            isvc,
            "spec.predictor.model.runtime",
            (f"{runtime.ref} does not serve model format {wanted!r}"),
        )
    if get(isvc, "spec.predictor.workerSpec") and get(runtime, "spec.workerSpec") is None:
        yield isvc, "spec.predictor.workerSpec", f"{runtime.ref} has no workerSpec to merge it with"


def _knative(pod: PodView, features: Mapping[str, str]) -> Iterator[Problem]:
    for part, sub, message in knative_rules.check_pod(pod, features):
        yield part.doc, part.path + sub, message


def _missing_volumes(pod: PodView) -> Iterator[Problem]:
    """Kubernetes refuses a pod whose volumeMount names no volume of the pod."""
    names = {v.value.get("name") for v in pod.volumes if isinstance(v.value, dict)}
    for container in pod.containers + pod.init_containers:
        for mount in container.mounts:
            name = mount.value.get("name") if isinstance(mount.value, dict) else None
            if name not in names:
                yield mount.doc, f"{mount.path}.name", f"volumeMount {name!r} names no volume"


def _env_refs(doc: Doc, at: str, injected: frozenset[str]) -> Iterator[Problem]:
    """A $(VAR) in args that neither the container nor KServe defines stays literal text."""
    for i, container in enumerate(get(doc, at) or []):
        defined = {v.get("name") for v in container.get("env") or []} | injected
        for j, arg in enumerate(container.get("args") or []):
            for var in VAR_REF.findall(str(arg)):
                if var not in defined:
                    yield (
                        doc,
                        f"{at}[{i}].args[{j}]",
                        (f"$({var}) is defined neither in the container's env nor by KServe"),
                    )


def _rendezvous(runtime: Doc) -> Iterator[Problem]:
    """Workers must find the head where KServe puts it: $(HEAD_SVC), which changes per
    generation (`<isvc>-head-<generation>`, constants.GetHeadServiceName)."""
    for i, container in enumerate(get(runtime, "spec.workerSpec.containers") or []):
        args = [str(a) for a in container.get("args") or []]
        for j, address in _dist_init_addrs(args):
            if not address.startswith("$(HEAD_SVC)"):
                yield (
                    runtime,
                    f"spec.workerSpec.containers[{i}].args[{j}]",
                    (
                        f"{address!r}: a worker reaches its head at $(HEAD_SVC), the only name "
                        "KServe gives it"
                    ),
                )


def _dist_init_addrs(args: list[str]) -> Iterator[tuple[int, str]]:
    """Each `--dist-init-addr` value with the index of the argument that holds it, given as
    `--dist-init-addr=ADDR` or as the next argument."""
    for j, arg in enumerate(args):
        if arg.startswith(DIST_INIT_ADDR + "="):
            yield j, arg.partition("=")[2]
        elif arg == DIST_INIT_ADDR and j + 1 < len(args):
            yield j + 1, args[j + 1]
