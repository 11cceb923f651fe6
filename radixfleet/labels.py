"""Label and annotation keys shared by the Pulumi program, the manifests and the controllers.

The node pools `pulumi up` creates carry the same labels the InferenceServices select and the
controllers reason about, so they are spelled once, here.
"""

GROUP = "radixfleet.io"

GPU_TYPE = f"{GROUP}/gpu-type"
GPU_POOL = f"{GROUP}/gpu-pool"
CAPACITY_TYPE = f"{GROUP}/capacity-type"
TENANT = f"{GROUP}/tenant"
MODEL = f"{GROUP}/model"
REGIONS = f"{GROUP}/regions"
GPUS_PER_REPLICA = f"{GROUP}/gpus-per-replica"
SLO_TTFT_P95_MS = f"{GROUP}/slo-ttft-p95-ms"
SLO_ITL_P95_MS = f"{GROUP}/slo-itl-p95-ms"
# On a prefill/decode model's InferenceServices and their pods: the role each serves
# (`prefill`, `decode`), beside `radixfleet.io/model` naming the pair; its router selects by both.
PD_ROLE = f"{GROUP}/pd-role"
# On a prefill pod: the port of its KV bootstrap server, where smg's Kubernetes discovery reads
# it (smg 1.13's default `bootstrap_port_annotation`) to tell the decode where to fetch the KV.
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"
# On an InferenceService: the name of the CanaryPolicy that carries its rollouts (the catalog's
# builder writes it, the canary reads it).
CANARY_POLICY = f"{GROUP}/canary-policy"
# On an InferenceService: where its revisions' routers load the model's tokenizer (the catalog's
# `tokenizer`; hf://ORG/NAME or a folder in the router's image), so prompts are counted by it.
TOKENIZER = f"{GROUP}/tokenizer"
# `SECRET/KEY` of the hub token a model's pods read as HF_TOKEN (a gated repository's weights or
# tokenizer): on the InferenceService, so its router reads the same key (never the value).
HF_TOKEN_SECRET = f"{GROUP}/hf-token-secret"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "radixfleet"
# A revision's router (radixfleet/controllers/routers): its component and the revision it routes to.
COMPONENT = "app.kubernetes.io/component"
ROUTER_COMPONENT = "router"
REVISION = f"{GROUP}/revision"
# Which of a revision's pods its router sends to (radixfleet/controllers/routers: smg's selector):
# `serving`, as every predictor pod starts; `warming` while the autoscaler pre-warms a new pod's
# prefix cache (radixfleet/controllers/autoscale/warming.py), after which it is `serving` again;
# `baseline` while a canary's rollout judges the canary against them (the stable model sent the
# canary's share of requests: radixfleet/controllers/canary/README.md). Prometheus's scrape copies
# it into a `pool` label.
POOL = f"{GROUP}/pool"
SERVING_POOL = "serving"
WARMING_POOL = "warming"
BASELINE_POOL = "baseline"

# Pod Security admission in tenant namespaces, judged by the rules of the Kubernetes minor the
# platform targets (an upgrade cannot loosen them). `baseline` is enforced; `restricted` (non-root,
# no privilege escalation, no capabilities, the runtime's seccomp profile) is audited and warned
# of. Enforcing `restricted` refuses every predictor with a storageUri: KServe 0.21 injects its
# storage-initializer without a securityContext (measured on the test cluster: Knative's webhook
# refused the LoRA model's Knative Service on exactly those four fields).
POD_SECURITY_LEVELS = {"enforce": "baseline", "audit": "restricted", "warn": "restricted"}
# radixfleet's own namespace enforces `restricted`: its pods (the operator's, the entry's, the GPU
# pools' placeholders) pass it, and the nodes' model-cache folder keeper, the one that needs a
# host folder and root, runs beside KServe's own node agent in KServe's namespace.
PLATFORM_POD_SECURITY_LEVELS = dict.fromkeys(("enforce", "audit", "warn"), "restricted")

# The taint every GPU node carries, and the toleration every GPU workload needs.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"
GPU_RESOURCE = "nvidia.com/gpu"


def gpu_toleration() -> dict[str, str]:
    """The toleration of the GPU taint, a fresh dict (manifests get edited in place)."""
    return {
        "key": GPU_TAINT_KEY,
        "operator": "Equal",
        "value": GPU_TAINT_VALUE,
        "effect": GPU_TAINT_EFFECT,
    }
