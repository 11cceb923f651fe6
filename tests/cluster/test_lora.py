"""A LoRA model served through the region entry, on the test cluster: a Knative InferenceService
on the rendered `sglang-lora` runtime (`--enable-lora`) with radixfleet's image and two adapters
in `--lora-paths`, as `radixfleet render` writes a tenant's base; the operator's routers
controller gives its revision an smg router, and the entry serves the tenant's adapters in both
of SGLang's spellings (`model: BASE:ADAPTER`, or `lora_path` beside the base's name).

What is real: KServe v0.20.0 and Knative (the revision, its pod), the rendered runtime, the
operator and the entry from radixfleet's kustomize bases, smg 1.13.0 with Kubernetes discovery.
What stands in: the replica is the emulator (no GPU, no adapter weights: SGLang's LoRA as
radixfleet/emulator/lora_routes.py serves it). Another tenant's LoRA base is only declared (its
pod can never be scheduled): the entry reads its adapters from the InferenceService alone.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import session
from testbed.cluster import Cluster, ClusterError
from testbed.deploy import entry_url, platform
from testbed.emulated import emulated_isvc, get, model_volume
from testbed.tenants import TenantSpec, onboarded

MODEL = "llama-lora"
TIMEOUT_S = 300.0
# Two GPUs for a one-GPU base: KServe begins every reconcile of the Knative Service with a
# dry-run update, which Knative's webhook answers by creating the Service's pod in a dry run,
# and the tenant's ResourceQuota counts that pod. With the budget exactly used (1/1) every dry
# run is refused ("exceeded quota: radixfleet-gpus"), KServe never copies the revision's
# readiness to the InferenceService, and no router is made. The same holds for any tenant whose
# Knative models use its whole budget: known, not fixed here (the quota's README).
HEADROOM = 2
# `amber`'s base is declared, never run.
TENANTS = {
    "teal": TenantSpec("teal", namespace="lora-teal", key="sk-teal-5c1e", gpus=HEADROOM),
    "amber": TenantSpec("amber", namespace="lora-amber", key="sk-amber-8d02", gpus=HEADROOM),
}
ADAPTERS = {"teal": ("teal-tone", "shared-sql"), "amber": ("amber-tone",)}


def _lora_args(adapters: tuple[str, ...]) -> list[str]:
    """The args `radixfleet render` gives a LoRA base (radixfleet/render/inferenceservices.py)."""
    paths = [f"{name}=/mnt/adapters/{name}" for name in adapters]
    return ["--lora-paths", *paths, "--max-loras-per-batch", "2"]


def _model(image: str, tenant: str) -> dict[str, Any]:
    namespace, adapters = TENANTS[tenant].namespace, ADAPTERS[tenant]
    owner = {"radixfleet.io/tenant": tenant}
    # What render writes and the quota's admission policy asks of a GPU model.
    gpus = {"radixfleet.io/gpu-type": "H100", "radixfleet.io/gpus-per-replica": "1"}
    isvc = emulated_isvc(image, name=MODEL, namespace=namespace, mode="Knative", labels=owner,
                         annotations=gpus, args=_lora_args(adapters))  # fmt: skip
    isvc["spec"]["predictor"]["model"]["runtime"] = "sglang-lora"
    if tenant != "teal":  # declared only: no node has this label, so its pod never runs
        isvc["spec"]["predictor"]["nodeSelector"] = {"radixfleet.io/test": "nowhere"}
    return isvc


@pytest.fixture(scope="module")
def served(
    kserve: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, float]]:
    """The operator, the entry and both tenants' LoRA bases applied; the entry's URL and when
    the models were applied."""
    with platform(kserve, tmp_path_factory.mktemp("overlays")) as image:
        applied = time.monotonic()
        with onboarded(kserve, list(TENANTS.values())):
            for tenant, spec in TENANTS.items():
                session.apply(kserve, [*model_volume(kserve, namespace=spec.namespace, model=MODEL),
                                       _model(image.pinned, tenant)])  # fmt: skip
            yield entry_url(kserve), applied


def _call(
    url: str, path: str, body: dict[str, Any] | None = None, *, tenant: str = "teal"
) -> tuple[int, dict[str, str], Any]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TENANTS[tenant].key}"}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read() or b"{}")
    except OSError as error:  # the entry's Service before its pods are ready
        return 0, {}, str(error)


def _knative_conditions(cluster: Cluster, namespace: str) -> str:
    """Each Knative object's conditions in `namespace`: which of them holds the revision back."""
    kinds = "ksvc,configuration,revision,podautoscaler,serverlessservice"
    found = get(cluster, kinds, "-n", namespace)
    return "\n".join(
        f"{item['kind']}/{item['metadata']['name']}: {json.dumps(item.get('status', {}))}"
        for item in found["items"]
    )


def _completion(prompt: str, **fields: Any) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": 2, **fields}


def _cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_a_tenants_adapter_answers_through_the_entry_in_both_spellings(
    served: tuple[str, float], kserve: Cluster
) -> None:
    url, applied = served
    cluster = kserve
    prompt = "A question for the teal tone adapter, asked at some length to fill a page. " * 6
    named = _completion(prompt, model=f"{MODEL}:teal-tone")

    last: list[Any] = []

    def answered() -> bool:  # through the revision's router (the Knative way while it has none)
        status, headers, answer = _call(url, "/v1/completions", named)
        last[:] = [status, headers.get("x-radixfleet-path"), answer]
        return status == 200 and headers.get("x-radixfleet-path") == "router"

    try:
        session.wait_for(answered, timeout_s=TIMEOUT_S, what=f"{MODEL}:teal-tone via the entry")
    except ClusterError as error:  # say what the entry answered last, and KServe's view
        namespace = TENANTS["teal"].namespace
        pods = cluster.kubectl("get", "pods,deployments", "-n", namespace, check=False).stdout
        status = get(cluster, "isvc", MODEL, "-n", namespace).get("status")
        knative = _knative_conditions(cluster, namespace)
        pytest.fail(f"{error}\nlast answer: {last}\n{pods}\n{json.dumps(status)}\n{knative}")
    print(f"\nLoRA adapter answered through the entry {time.monotonic() - applied:.1f} s after "
          "the models were applied")  # fmt: skip

    # The other spelling reaches the same adapter: the prompt its first request cached under
    # `teal-tone` is a hit (one pod), and the base's request for it a miss (its own cache).
    by_name = _completion(prompt, model=MODEL, lora_path="teal-tone")
    status, _, by_lora_path = _call(url, "/v1/completions", by_name)
    assert status == 200, by_lora_path
    assert _cached(by_lora_path) > 0, by_lora_path
    status, _, by_base = _call(url, "/v1/completions", _completion(prompt, model=MODEL))
    assert status == 200, by_base
    assert _cached(by_base) == 0, by_base


def test_a_tenant_lists_its_own_adapters_and_another_tenants_is_404(
    served: tuple[str, float],
) -> None:
    url, _ = served
    listed = {
        tenant: _listed(url, tenant) for tenant in TENANTS
    }  # both tenants' InferenceServices read, ready or not
    assert listed["teal"] == {MODEL, f"{MODEL}:teal-tone", f"{MODEL}:shared-sql"}
    assert listed["amber"] == {MODEL, f"{MODEL}:amber-tone"}
    for body in ({"model": f"{MODEL}:amber-tone"}, {"model": MODEL, "lora_path": "amber-tone"}):
        status, _, answer = _call(url, "/v1/completions", _completion("Hi.", **body))
        assert status == 404, (body, answer)
        assert answer["error"]["code"] == "model_not_found", answer


def _listed(url: str, tenant: str) -> set[str]:
    """The model ids `tenant` is listed, once the entry has read both tenants' models."""
    found: set[str] = set()

    def read() -> bool:
        status, _, answer = _call(url, "/v1/models", tenant=tenant)
        if status == 200:
            found.update(model["id"] for model in answer["data"])
        return len(found) > 1

    session.wait_for(read, timeout_s=TIMEOUT_S, what=f"{tenant}'s adapters listed by the entry")
    return found
