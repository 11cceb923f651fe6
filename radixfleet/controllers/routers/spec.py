"""What a revision's router is: names, ports, labels and smg's command line, in one place.

A router is an smg Deployment and its Service, named after the Knative revision it routes to
(`<revision>-router`, in the revision's namespace). smg finds the revision's pods itself through
Kubernetes discovery (`serving.knative.dev/revision=<revision>`, and `radixfleet.io/pool=serving`
where the pods carry that label: a pod pre-warming is left out) and sends requests to each pod's
queue-proxy port, not to the SGLang container: Knative's autoscaler counts concurrency at the
queue-proxy, so a router that bypassed it would leave a busy revision looking idle, and Knative
would scale it to zero while it served.

While a canary rolls out, the stable revision also has a baseline router
(`<revision>-baseline-router`) selecting its `radixfleet.io/pool=baseline` pods: the stable
model at the canary's load, which the canary controller carves out of the stable revision when
its policy asks for a baseline (radixfleet/controllers/canary/baseline.py), and the region entry
sends the canary's share. Until then it has no worker.

A Standard-mode model (KServe's raw Deployments; every multi-node model) has no revision: its
router is named for, and owned by, its head's Deployment (`<isvc>-predictor-router`), and selects
the head's pods alone (`app=isvc.<isvc>-predictor`: rank 0 serves HTTP, the workers serve only
their health) on SGLang's own port, as no queue-proxy stands in front of them.

A prefill/decode model (two Knative InferenceServices, `<model>-prefill` and `<model>-decode`)
has one router, `<model>-router`, owned by its decode InferenceService: smg in PD mode selects
each role's `serving` pods (`serving.kserve.io/inferenceservice=<model>-<role>`) on their
queue-proxy port, sends every request to a prefill and a decode at once
(cache-aware for the prefill, whose prefix cache is the one that saves work; least-loaded for
the decode, whose cost is the batch it joins), and reads each prefill pod's bootstrap port from
its `sglang.ai/bootstrap-port` annotation.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixfleet import dataplane, labels
from radixfleet.platform import KSERVE_INFERENCESERVICE_LABEL, head_pod_label

NAME = "routers"
SERVICE_ACCOUNT = "radixfleet-router"  # in each tenant namespace, rendered with the catalog
REVISION_LABEL = "serving.knative.dev/revision"
COMPONENT = labels.COMPONENT
ROLE = labels.ROUTER_COMPONENT
ROUTES_FOR = labels.REVISION  # the revision a router serves, on its objects


@dataclass(frozen=True, order=True)
class Router:
    """One revision's router: owned by the Knative Revision (`revision_uid`), so it goes when
    Knative garbage-collects the revision; `isvc` and `tenant` label it."""

    namespace: str
    revision: str
    isvc: str
    tenant: str = ""
    revision_uid: str = ""
    # The revision's pods carry `radixfleet.io/pool`: smg sends only to `serving` ones (a pod
    # warming up is not one yet). A revision made before the label has none and is not gated.
    pooled: bool = False
    pool: str = labels.SERVING_POOL  # `baseline`: the router of a canary's baseline
    # The key of the data plane's Secret the revision's pods read (radixfleet.dataplane).
    data_plane_key: str = dataplane.KEY
    # Where smg loads the model's tokenizer (the InferenceService's `radixfleet.io/tokenizer`:
    # hf://ORG/NAME or a folder in the image), to count prompts for the entry; "": none.
    tokenizer: str = ""
    # `SECRET/KEY` of the hub token smg reads as HF_TOKEN when the tokenizer's repository is
    # gated (the InferenceService's `radixfleet.io/hf-token-secret`); "": none.
    hub_token: str = ""
    # A Standard-mode model's head: `revision` names its Deployment, which owns the router.
    standard: bool = False
    # A prefill/decode model's router: `revision` names the model, `isvc` its decode
    # InferenceService, which owns the router.
    pd: bool = False

    @property
    def routes_for(self) -> str:
        """What it routes to: the revision, or `<revision>-baseline` (its objects' label)."""
        return dataplane.routes_for(self.revision, self.pool)

    @property
    def name(self) -> str:
        """The Deployment's and the Service's name (where the entry finds it)."""
        return dataplane.router_name(self.revision, self.pool)


def smg_args(router: Router) -> list[str]:
    """smg's command line for one revision (cache-aware) or one prefill/decode model (PD
    mode), its pods found by Kubernetes discovery."""
    return [
        "launch",
        "--host", "0.0.0.0", "--port", str(dataplane.ROUTER_PORT),
        *(pd_args(router) if router.pd else ["--policy", "cache_aware"]),
        "--service-discovery",
        *([] if router.pd else ["--selector", *selector(router)]),
        "--service-discovery-namespace", router.namespace,
        "--service-discovery-port",
        str(dataplane.PREDICTOR_PORT if router.standard else dataplane.QUEUE_PROXY_PORT),
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(dataplane.ROUTER_METRICS_PORT),
        # The data plane's key: required of the entry, presented to the predictors.
        *dataplane.api_key_args(),
        *tokenizer_args(router.tokenizer),
        "--log-level", "warn",
    ]  # fmt: skip


# smg's policies in PD mode: a prefill's prefix cache saves the prompt's work, so the prefill
# goes where the prefix is; a decode's cost is the batch it joins, so the decode goes to the
# least loaded of two drawn at random (smg's power_of_two).
PD_PREFILL_POLICY = "cache_aware"
PD_DECODE_POLICY = "power_of_two"


def pd_args(router: Router) -> list[str]:
    """smg's PD-mode flags: each role's pods by selector, a policy for each."""
    return [
        "--pd-disaggregation",
        "--prefill-selector", *role_selector(router, "prefill"),
        "--decode-selector", *role_selector(router, "decode"),
        "--prefill-policy", PD_PREFILL_POLICY,
        "--decode-policy", PD_DECODE_POLICY,
    ]  # fmt: skip


def role_selector(router: Router, role: str) -> list[str]:
    """The `serving` pods of one role of a prefill/decode model, by the label KServe puts on its
    InferenceService's pods: the data-plane guard lets no other pod carry it
    (radixfleet/render/data_plane_guard.py), so smg never hands the data plane's key to a
    tenant's own pod labelled like a role."""
    return [f"{KSERVE_INFERENCESERVICE_LABEL}={router.revision}-{role}",
            f"{labels.POOL}={labels.SERVING_POOL}"]  # fmt: skip


def selector(router: Router) -> list[str]:
    """The labels of the pods the router sends to, as smg's `--selector` takes them."""
    if router.standard:
        key, value = head_pod_label(router.isvc)
        return [f"{key}={value}"]
    return [
        f"{REVISION_LABEL}={router.revision}",
        # A baseline's router selects its pool always: without the label it would take them all.
        *([f"{labels.POOL}={router.pool}"] if router.pooled or router.pool != labels.SERVING_POOL
          else []),
    ]  # fmt: skip


def tokenizer_args(source: str) -> list[str]:
    """smg's flags to load the model's tokenizer: a hub repository is a model path (smg
    fetches its tokenizer files), a folder a tokenizer path; without one, none at all."""
    if source.startswith("hf://"):
        return ["--model-path", source.removeprefix("hf://")]
    return ["--tokenizer-path", source] if source else []
