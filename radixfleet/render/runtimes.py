"""SGLang ClusterServingRuntimes: one per way of running a model (see `KNOWN_RUNTIMES`).

Every runtime serves SGLang's OpenAI-compatible API on 8080 with metrics and cache reports on,
RadixAttention prefix caching on (SGLang's default; nothing here disables it) and longest-prefix-
match scheduling. Per-model values (tensor parallel size, context length, LoRA adapters) come from
the InferenceService's `args`, which KServe appends to the runtime's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixfleet import dataplane
from radixfleet.config.catalog import KNOWN_RUNTIMES
from radixfleet.render.yamlout import Notes

# By tag in the kustomize base (runtimes/): a cluster pins it by digest, the Pulumi program from
# its stack config (`radixfleet:runtime`), `kubectl apply -k` through an overlay's `images:`.
SGLANG_IMAGE = "lmsysorg/sglang:v0.5.23-cu129"
# The one writable path of a runtime's container (its root file system is read-only), and its
# HOME: SGLang's IPC sockets, and the kernel caches Triton, FlashInfer and torch write under ~.
SCRATCH_DIR = "/tmp"
PORT = 8080
# Knative admits only "", "http1" or "h2c" as the serving port's name (it picks the protocol
# from it); SGLang speaks HTTP/1.1. Raw deployments take any name, so every runtime uses this one.
PORT_NAME = "http1"
# The one model format every runtime serves. KServe's ClusterServingRuntime webhook refuses two
# runtimes that both auto-select the same format at the same priority, so only AUTO_SELECT
# offers itself to InferenceServices that name no runtime; the others must be named.
MODEL_FORMAT = "sglang"
AUTO_SELECT = "sglang"
MODEL_DIR = "/mnt/models"
# A multi-node replica's head listens here for its workers (torch.distributed rendezvous).
DIST_INIT_PORT = 5757
# The head learns its own address from the downward API; KServe gives only the workers the
# head's name, as HEAD_SVC: a headless Service `<isvc>-head-<generation>` that changes with
# every generation, so no name can be written here (kserve v0.20.0,
# pkg/controller/v1beta1/inferenceservice/components/predictor.go, constants.GetHeadServiceName).
HEAD_ADDR = f"$(POD_IP):{DIST_INIT_PORT}"
WORKER_HEAD_ADDR = f"$(HEAD_SVC):{DIST_INIT_PORT}"
POD_IP_ENV = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
# Prefill servers hand KV caches to decode servers through this bootstrap port.
PD_BOOTSTRAP_PORT = 8998

# Startup budget: 10 s between probes, 180 failures = 30 minutes. Cold starts of large models
# take minutes (weights from S3 at ~260 MB/s: 140 GB is ~9 min, plus CUDA graphs), and a
# startup probe that gives up early restarts the download forever.
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 180
# The scratch volume's bound on the node's disk: JIT kernel caches run to a few GiB.
SCRATCH_GI = 16


@dataclass(frozen=True)
class RuntimeVariant:
    """What distinguishes one SGLang runtime from another."""

    name: str
    summary: str
    extra_args: tuple[str, ...] = ()
    multinode: bool = False
    shm_gi: int = 16
    notes: dict[str, str] = field(default_factory=dict)


VARIANTS: dict[str, RuntimeVariant] = {
    v.name: v
    for v in (
        RuntimeVariant("sglang", "one GPU per replica"),
        RuntimeVariant(
            "sglang-tp",
            "tensor parallel on one node; the InferenceService passes --tp-size",
            shm_gi=64,
        ),
        RuntimeVariant(
            "sglang-multinode",
            "one replica across two nodes (head + worker), KServe workerSpec",
            multinode=True,
            shm_gi=64,
        ),
        RuntimeVariant(
            "sglang-lora",
            "multi-LoRA: adapters from the InferenceService's storageUris, batched together",
            extra_args=("--enable-lora",),
        ),
        RuntimeVariant(
            "sglang-prefill",
            "prefill role of a prefill/decode disaggregated pair",
            extra_args=(
                "--disaggregation-mode",
                "prefill",
                "--disaggregation-bootstrap-port",
                str(PD_BOOTSTRAP_PORT),
            ),
        ),
        RuntimeVariant(
            "sglang-decode",
            "decode role of a prefill/decode disaggregated pair",
            extra_args=("--disaggregation-mode", "decode"),
        ),
    )
}
assert set(VARIANTS) == set(KNOWN_RUNTIMES), "every catalog runtime needs a variant"


def server_args(variant: RuntimeVariant) -> list[str]:
    """The `python3 -m sglang.launch_server` arguments every replica of the variant starts with."""
    return [
        "--model-path",
        MODEL_DIR,
        # KServe replaces {{.Name}} with the InferenceService's name: clients and the router
        # address the model by the name the platform team gave it.
        "--served-model-name",
        "{{.Name}}",
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
        "--enable-metrics",
        "--enable-cache-report",
        "--schedule-policy",
        "lpm",
        # Every request but /health and /metrics needs the data plane's key: the model answers
        # its router and the entry, not whoever reaches the pod (radixfleet.dataplane).
        *dataplane.api_key_args(),
        *variant.extra_args,
    ]


def _probe(path: str, *, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
    "readOnlyRootFilesystem": True,
}


def _container(variant: RuntimeVariant, args: list[str], image: str) -> dict[str, Any]:
    return {
        "name": "kserve-container",
        "image": image,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args,
        "env": [
            {"name": "HOME", "value": SCRATCH_DIR},
            {"name": "HF_HOME", "value": f"{SCRATCH_DIR}/hf_home"},
            {"name": "SGLANG_ENABLE_TORCH_COMPILE", "value": "0"},
            # The key the InferenceService names (a rotation's new one), else `api-key`.
            dataplane.env_var(dataplane.KEY_PLACEHOLDER),
        ],
        "ports": [{"containerPort": PORT, "name": PORT_NAME, "protocol": "TCP"}],
        "startupProbe": _probe("/health", period=STARTUP_PERIOD_S, failures=STARTUP_FAILURES),
        "readinessProbe": _probe("/health", period=10, failures=3),
        "livenessProbe": _probe("/health", period=30, failures=5),
        "securityContext": SECURITY_CONTEXT,
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "scratch", "mountPath": SCRATCH_DIR},
        ],
    }


def _volumes(variant: RuntimeVariant) -> list[dict[str, Any]]:
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{variant.shm_gi}Gi"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": f"{SCRATCH_GI}Gi"}},
    ]


def _worker_spec(variant: RuntimeVariant, image: str) -> dict[str, Any]:
    worker_args = [*server_args(variant), "--nnodes", "2", "--node-rank", "1"]
    worker_args += [f"--dist-init-addr={WORKER_HEAD_ADDR}"]
    container = _container(variant, _worker_only(worker_args), image)
    container["name"] = "worker-container"
    # A worker serves no HTTP of its own: only the head answers /health.
    for key in ("startupProbe", "readinessProbe", "livenessProbe", "ports"):
        del container[key]
    # Nor does it hold the data plane's key: its health server asks for none, and KServe fills
    # no `{{...}}` placeholder in a worker's container (kserve v0.20.0 predictor.go replaces
    # them in the head's alone), so the key's templated name would stop the pod from starting.
    container["env"] = [e for e in container["env"] if e["name"] != dataplane.ENV]
    return {"pipelineParallelSize": 2, "containers": [container], "volumes": _volumes(variant)}


def _worker_only(args: list[str]) -> list[str]:
    """A worker's arguments: the head's but the API key and the served name (templated)."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
        elif arg == "--served-model-name":
            skip_value = True
        elif not arg.startswith("--api-key"):
            kept.append(arg)
    return kept


def build_runtime(name: str, *, image: str = SGLANG_IMAGE) -> tuple[dict[str, Any], Notes]:
    """The ClusterServingRuntime named `name` running `image` (SGLang's, by tag, unless a
    pinned reference is given), and the comments that explain its choices."""
    variant = VARIANTS[name]
    args = server_args(variant)
    if variant.multinode:
        args += ["--nnodes", "2", "--node-rank", "0", f"--dist-init-addr={HEAD_ADDR}"]
    head = _container(variant, args, image)
    if variant.multinode:
        head["env"].append(POD_IP_ENV)
    spec: dict[str, Any] = {
        "annotations": {
            "prometheus.kserve.io/port": str(PORT),
            "prometheus.kserve.io/path": "/metrics",
        },
        "supportedModelFormats": [_model_format(name)],
        "protocolVersions": ["v1"],
        "containers": [head],
        "volumes": _volumes(variant),
    }
    if variant.multinode:
        spec["workerSpec"] = _worker_spec(variant, image)
    runtime = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "radixfleet"},
            "annotations": {"radixfleet.io/summary": variant.summary},
        },
        "spec": spec,
    }
    return runtime, _notes(variant)


def _model_format(name: str) -> dict[str, Any]:
    if name == AUTO_SELECT:
        return {"name": MODEL_FORMAT, "autoSelect": True, "priority": 1}
    return {"name": MODEL_FORMAT, "autoSelect": False}


def _notes(variant: RuntimeVariant) -> dict[str, str]:
    notes = {
        "spec.supportedModelFormats": "Only the plain sglang runtime auto-selects the format; "
        "the others serve only\nInferenceServices that name them (KServe refuses two "
        "auto-selecting runtimes of one format and priority).",
        "spec.annotations": "KServe copies these to the pods: Prometheus scrapes SGLang's "
        "/metrics (sglang:* series).",
        "spec.containers[0].args": "--enable-metrics exports sglang:* series; "
        "--enable-cache-report returns cached_tokens in usage;\n"
        "lpm (longest prefix match) schedules queued requests that share cached prefixes first.\n"
        "RadixAttention is SGLang's default and stays on (no --disable-radix-cache).",
        "spec.containers[0].startupProbe": f"{STARTUP_PERIOD_S} s x {STARTUP_FAILURES} = "
        f"{STARTUP_PERIOD_S * STARTUP_FAILURES // 60} min: large models take minutes to download "
        "and load;\ngiving up earlier restarts the pod mid-download and it never becomes ready.",
        "spec.containers[0].securityContext": "SGLang needs no root and no capabilities, and "
        f"writes only under {SCRATCH_DIR}\n(its HOME: IPC sockets, kernel caches), an emptyDir; "
        "the root file system is read-only.",
        "spec.volumes": f"NCCL and the tokenizer workers share tensors through /dev/shm; "
        f"the 64 MiB default is far too small ({variant.shm_gi}Gi).",
    }
    if variant.multinode:
        notes["spec.workerSpec"] = (
            "KServe runs multi-node replicas in Standard (raw) mode only: the head (rank 0)\n"
            "serves HTTP, the worker (rank 1) joins it on "
            f"{DIST_INIT_PORT} at $(HEAD_SVC), which KServe sets in the worker's env."
        )
    return notes
