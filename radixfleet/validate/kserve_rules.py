"""KServe's admission rules for runtimes and InferenceServices, as our own checks.

Read from github.com/kserve/kserve v0.20.0 (the release whose CRDs radixfleet ships):

- `pkg/webhook/admission/servingruntime/servingruntime_webhook.go`: two enabled runtimes of one
  scope (all ClusterServingRuntimes; the ServingRuntimes of one namespace) that share a
  protocol version and are both single- or both multi-model may not auto-select the same
  model format (name case-insensitive, equal or both unset version) at the same priority
  (`validateServingRuntimePriority`); one runtime may not give one auto-selected format two
  priorities (`validateModelFormatPrioritySame`); a workerSpec has one container, and the
  `kserve-container` sets neither PIPELINE_PARALLEL_SIZE nor TENSOR_PARALLEL_SIZE, KServe does
  (`validateMultiNodeSpec`); no container sets PYTHONPATH (`pkg/validation/env_policy.go`).
- `pkg/apis/serving/v1beta1/inference_service_validation.go`: a workerSpec needs one worker
  container, a model `storageUri` on pvc:// or oci://, and the annotation
  `serving.kserve.io/autoscalerClass: none` (`validateMultiNodeVariables`); the autoscaler
  class is one of hpa, external, keda, none (`validateInferenceServiceAutoscaler`); Knative
  mode scales on concurrency or rps only (`validateScalingKPACompExtension`); storageUri and
  storageUris exclude each other, and storageUris mount at absolute paths without "..",
  below one common parent other than / (`validateMultipleStorageURIs`).
- `pkg/constants/constants.go`: the deployment modes (Knative, Standard and their deprecated
  names Serverless, RawDeployment); no annotation means the cluster's default, which infra sets
  to Knative (radixfleet.platform.DEFAULT_DEPLOYMENT_MODE).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

from radixfleet.platform import DEFAULT_DEPLOYMENT_MODE
from radixfleet.validate.podview import Doc, get

RUNTIME_KINDS = ("ClusterServingRuntime", "ServingRuntime")
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
AUTOSCALER_CLASSES = ("hpa", "external", "keda", "none")
KNATIVE_MODES = ("Knative", "Serverless")
KPA_METRICS = ("concurrency", "rps")
HPA_ONLY_METRICS = ("cpu", "memory")
MULTINODE_STORAGE = ("pvc", "oci")
PARALLEL_ENV = ("PIPELINE_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE")
BLOCKED_ENV = ("PYTHONPATH",)

Problem = tuple[Doc, str, str]


def is_knative(isvc: Doc) -> bool:
    """Whether KServe runs this InferenceService's predictor as a Knative Service: by its
    annotation, else by the cluster's default mode (pkg/controller/v1beta1/inferenceservice/
    utils/utils.go, GetDeploymentMode)."""
    annotations = get(isvc, "metadata.annotations") or {}
    return annotations.get(DEPLOYMENT_MODE, DEFAULT_DEPLOYMENT_MODE) in KNATIVE_MODES


def check_runtimes(docs: Sequence[Doc]) -> Iterator[Problem]:
    """Collisions between runtimes, and each runtime's own rules."""
    runtimes = [d for d in docs if d.body.get("kind") in RUNTIME_KINDS]
    for i, later in enumerate(runtimes):
        # Applied in this order, the webhook refuses a runtime at the first earlier one it
        # collides with; one line per refused runtime says so.
        earlier = (e for e in runtimes[:i] if _scope(e) == _scope(later))
        yield from next(filter(None, (list(_collision(e, later)) for e in earlier)), [])
    for runtime in runtimes:
        yield from _priorities_within(runtime)
        yield from _runtime_multinode(runtime)
        yield from _blocked_env(runtime, "spec.containers")
        yield from _blocked_env(runtime, "spec.workerSpec.containers")


def _scope(runtime: Doc) -> tuple[str, str]:
    namespace = get(runtime, "metadata.namespace") or ""
    return str(runtime.body.get("kind")), namespace if runtime.body[
        "kind"
    ] == "ServingRuntime" else ""


def _enabled(runtime: Doc) -> bool:
    return get(runtime, "spec.disabled") is not True


def _collision(first: Doc, second: Doc) -> Iterator[Problem]:
    a, b = first.body.get("spec") or {}, second.body.get("spec") or {}
    if not (_enabled(first) and _enabled(second)) or first.ref == second.ref:
        return
    if bool(a.get("multiModel")) != bool(b.get("multiModel")):
        return
    if not set(a.get("protocolVersions") or []) & set(b.get("protocolVersions") or []):
        return
    for i, mine in enumerate(b.get("supportedModelFormats") or []):
        if any(_same_slot(theirs, mine) for theirs in a.get("supportedModelFormats") or []):
            where = f"spec.supportedModelFormats[{i}]"
            yield (
                second,
                where,
                (
                    f"auto-selects model format {mine.get('name')!r} at priority "
                    f"{mine.get('priority')} like {first.ref}: KServe refuses a second runtime "
                    "auto-selecting one format and version at one priority"
                ),
            )


def _same_slot(x: dict[str, Any], y: dict[str, Any]) -> bool:
    both_auto = x.get("autoSelect") is True and y.get("autoSelect") is True
    same_format = str(x.get("name", "")).lower() == str(y.get("name", "")).lower()
    same_priority = x.get("priority") is not None and x.get("priority") == y.get("priority")
    return both_auto and same_format and x.get("version") == y.get("version") and same_priority


def _priorities_within(runtime: Doc) -> Iterator[Problem]:
    seen: dict[str, Any] = {}
    for i, fmt in enumerate(get(runtime, "spec.supportedModelFormats") or []):
        if fmt.get("autoSelect") is not True:
            continue
        name, priority = fmt.get("name"), fmt.get("priority")
        if name in seen and None not in (seen[name], priority) and seen[name] != priority:
            yield (
                runtime,
                f"spec.supportedModelFormats[{i}].priority",
                (f"model format {name!r} has two priorities in one runtime"),
            )
        seen.setdefault(name, priority)


def _runtime_multinode(runtime: Doc) -> Iterator[Problem]:
    worker = get(runtime, "spec.workerSpec")
    if worker is None:
        return
    if len(worker.get("containers") or []) > 1:
        yield runtime, "spec.workerSpec.containers", "KServe allows one container in a workerSpec"
    for i, container in enumerate(get(runtime, "spec.containers") or []):
        if container.get("name") == "kserve-container":
            yield from _parallel_env(runtime, f"spec.containers[{i}].env", container.get("env"))


def _parallel_env(doc: Doc, at: str, env: list[Any] | None) -> Iterator[Problem]:
    for j, var in enumerate(env or []):
        if var.get("name") in PARALLEL_ENV:
            yield doc, f"{at}[{j}]", f"KServe sets {var['name']} itself for multi-node replicas"


def _blocked_env(doc: Doc, at: str) -> Iterator[Problem]:
    for i, container in enumerate(get(doc, at) or []):
        for j, var in enumerate(container.get("env") or []):
            if var.get("name") in BLOCKED_ENV:
                yield doc, f"{at}[{i}].env[{j}]", f"KServe refuses {var['name']} in any container"


def check_inference_service(isvc: Doc) -> Iterator[Problem]:
    """The rules KServe's InferenceService webhook applies to one InferenceService."""
    yield from _autoscaler_class(isvc)
    yield from _isvc_multinode(isvc)
    yield from _storage(isvc)
    if is_knative(isvc):
        yield from _knative_scaling(isvc)
    model = get(isvc, "spec.predictor.model") or {}
    for j, var in enumerate(model.get("env") or []):
        if var.get("name") in BLOCKED_ENV:
            yield isvc, f"spec.predictor.model.env[{j}]", f"KServe refuses {var['name']}"
    yield from _blocked_env(isvc, "spec.predictor.workerSpec.containers")


def _autoscaler_class(isvc: Doc) -> Iterator[Problem]:
    annotations = get(isvc, "metadata.annotations") or {}
    value = annotations.get(AUTOSCALER_CLASS)
    if value is not None and value not in AUTOSCALER_CLASSES:
        yield (
            isvc,
            f"metadata.annotations.{AUTOSCALER_CLASS}",
            (f"{value!r} is not an autoscaler class of KServe: {', '.join(AUTOSCALER_CLASSES)}"),
        )


def _isvc_multinode(isvc: Doc) -> Iterator[Problem]:
    worker = get(isvc, "spec.predictor.workerSpec")
    if worker is None:
        return
    if len(worker.get("containers") or []) > 1:
        yield isvc, "spec.predictor.workerSpec.containers", "KServe allows one worker container"
    model_env = get(isvc, "spec.predictor.model.env")
    yield from _parallel_env(isvc, "spec.predictor.model.env", model_env)
    uri = get(isvc, "spec.predictor.model.storageUri")
    if uri is None:
        yield isvc, "spec.predictor.model.storageUri", "KServe needs a storageUri for multi-node"
    elif str(uri).split("://", 1)[0] not in MULTINODE_STORAGE:
        yield (
            isvc,
            "spec.predictor.model.storageUri",
            (f"{uri!r}: KServe loads multi-node models only from pvc:// or oci://"),
        )
    annotations = get(isvc, "metadata.annotations") or {}
    if annotations.get(AUTOSCALER_CLASS) != "none":
        yield (
            isvc,
            f"metadata.annotations.{AUTOSCALER_CLASS}",
            (f"KServe runs a workerSpec only with {AUTOSCALER_CLASS}: none"),
        )


def _storage(isvc: Doc) -> Iterator[Problem]:
    uris = get(isvc, "spec.predictor.storageUris")
    if uris is None:
        return
    if get(isvc, "spec.predictor.model.storageUri") is not None:
        yield (
            isvc,
            "spec.predictor.storageUris",
            "KServe refuses storageUri and storageUris together",
        )
    paths: list[str] = []
    for i, entry in enumerate(uris):
        mount = str(entry.get("mountPath", "/mnt/models"))
        if mount == "/" or not mount.startswith("/") or ".." in mount:
            yield (
                isvc,
                f"spec.predictor.storageUris[{i}].mountPath",
                (f"{mount!r}: KServe wants an absolute path below / without '..'"),
            )
        elif not str(entry.get("uri", "")).startswith("pvc://"):
            paths.append(mount)
    if len(paths) > 1 and posixpath.commonpath(paths) == "/":
        yield (
            isvc,
            "spec.predictor.storageUris",
            (f"mount paths {paths} share no parent below /: KServe refuses them"),
        )


def _knative_scaling(isvc: Doc) -> Iterator[Problem]:
    metric = get(isvc, "spec.predictor.scaleMetric")
    # Values outside KServe's enum are the schema's finding; these are KServe's but not Knative's.
    if metric in HPA_ONLY_METRICS:
        yield (
            isvc,
            "spec.predictor.scaleMetric",
            (f"{metric!r}: Knative mode scales on {' or '.join(KPA_METRICS)} only"),
        )
    if get(isvc, "spec.predictor.deploymentStrategy") is not None:
        yield isvc, "spec.predictor.deploymentStrategy", "KServe allows it in Standard mode only"
