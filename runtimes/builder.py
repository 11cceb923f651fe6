"""SGLang ClusterServingRuntimes: one per way of running a model (see `KNOWN_RUNTIMES`).

Every runtime serves SGLang's OpenAI-compatible API on 8080 with metrics and cache reports on,
RadixAttention prefix caching on (SGLang's default; nothing here disables it) and longest-prefix-
match scheduling. Per-model values (tensor parallel size, context length, LoRA adapters) come from
the InferenceService's `args`, which KServe appends to the runtime's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixfleet.config.catalog import KNOWN_RUNTIMES
from radixfleet.render.yamlout import Notes

SGLANG_IMAGE = "lmsysorg/sglang:v0.5.23-cu129"
PORT = 8080
MODEL_DIR = "/mnt/models"
# A multi-node replica's head listens here for its workers (torch.distributed rendezvous).
DIST_INIT_PORT = 5757
# Prefill servers hand KV caches to decode servers through this bootstrap port.
PD_BOOTSTRAP_PORT = 8998

# Startup budget: 10 s between probes, 180 failures = 30 minutes. Cold starts of large models
# take minutes (weights from S3 at ~260 MB/s: 140 GB is ~9 min, plus CUDA graphs), and a
# startup probe that gives up early restarts the download forever.
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 180


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
}


def _container(variant: RuntimeVariant, args: list[str]) -> dict[str, Any]:
    return {
        "name": "kserve-container",
        "image": SGLANG_IMAGE,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args,
        "env": [
            {"name": "HF_HOME", "value": "/tmp/hf_home"},
            {"name": "SGLANG_ENABLE_TORCH_COMPILE", "value": "0"},
        ],
        "ports": [{"containerPort": PORT, "name": "http", "protocol": "TCP"}],
        "startupProbe": _probe("/health", period=STARTUP_PERIOD_S, failures=STARTUP_FAILURES),
        "readinessProbe": _probe("/health", period=10, failures=3),
        "livenessProbe": _probe("/health", period=30, failures=5),
        "securityContext": SECURITY_CONTEXT,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _volumes(variant: RuntimeVariant) -> list[dict[str, Any]]:
    return [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{variant.shm_gi}Gi"}}]


def _worker_spec(variant: RuntimeVariant) -> dict[str, Any]:
    head = f"{{{{.Name}}}}-predictor-head:{DIST_INIT_PORT}"
    worker_args = [*server_args(variant), "--nnodes", "2", "--node-rank", "1"]
    worker_args += ["--dist-init-addr", head]
    container = _container(variant, worker_args)
    container["name"] = "worker-container"
    # A worker serves no HTTP of its own: only the head answers /health.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        del container[probe]
    return {"pipelineParallelSize": 2, "containers": [container], "volumes": _volumes(variant)}


def build_runtime(name: str) -> tuple[dict[str, Any], Notes]:
    """The ClusterServingRuntime named `name`, and the comments that explain its choices."""
    variant = VARIANTS[name]
    args = server_args(variant)
    if variant.multinode:
        args += ["--nnodes", "2", "--node-rank", "0"]
        args += ["--dist-init-addr", f"{{{{.Name}}}}-predictor-head:{DIST_INIT_PORT}"]
    spec: dict[str, Any] = {
        "annotations": {
            "prometheus.kserve.io/port": str(PORT),
            "prometheus.kserve.io/path": "/metrics",
        },
        "supportedModelFormats": [{"name": "sglang", "autoSelect": True, "priority": 1}],
        "protocolVersions": ["v1"],
        "containers": [_container(variant, args)],
        "volumes": _volumes(variant),
    }
    if variant.multinode:
        spec["workerSpec"] = _worker_spec(variant)
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


def _notes(variant: RuntimeVariant) -> dict[str, str]:
    notes = {
        "spec.annotations": "KServe copies these to the pods: Prometheus scrapes SGLang's "
        "/metrics (sglang:* series).",
        "spec.containers[0].args": "--enable-metrics exports sglang:* series; "
        "--enable-cache-report returns cached_tokens in usage;\n"
        "lpm (longest prefix match) schedules queued requests that share cached prefixes first.\n"
        "RadixAttention is SGLang's default and stays on (no --disable-radix-cache).",
        "spec.containers[0].startupProbe": f"{STARTUP_PERIOD_S} s x {STARTUP_FAILURES} = "
        f"{STARTUP_PERIOD_S * STARTUP_FAILURES // 60} min: large models take minutes to download "
        "and load;\ngiving up earlier restarts the pod mid-download and it never becomes ready.",
        "spec.containers[0].securityContext": "SGLang needs no root and no capabilities.",
        "spec.volumes": f"NCCL and the tokenizer workers share tensors through /dev/shm; "
        f"the 64 MiB default is far too small ({variant.shm_gi}Gi).",
    }
    if variant.multinode:
        notes["spec.workerSpec"] = (
            "KServe runs multi-node replicas in RawDeployment mode only: the head (rank 0)\n"
            "serves HTTP, the worker (rank 1) joins it at the head service on "
            f"{DIST_INIT_PORT}."
        )
    return notes
