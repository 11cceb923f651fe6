"""The LoRA controller's Kubernetes adapter: a LoRA InferenceService's ready pods, and SGLang's
load and unload API on each, with the RBAC it needs declared beside the calls.

Not run on a cluster yet (the controller halts without a demand source, controller.py). What a
pod holds is read from its own `GET /v1/models` (SGLang lists each loaded adapter with its base as
`parent`); a pod that does not answer is left out of the pass. Calls go to the pod's IP on
SGLang's port with the data plane's key the pod requires.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from radixfleet.controllers.lora.observed import Action, Replica
from radixfleet.kit.kube import INFERENCE_SERVICES, kube_call
from radixfleet.kit.rbac import READ, PolicyRule, rule

ISVC_LABEL = "serving.kserve.io/inferenceservice"
SGLANG_PORT = 8080
TIMEOUT_S = 10.0

RULES: tuple[PolicyRule, ...] = (
    INFERENCE_SERVICES.rule(*READ),  # the loop watches them; a pass lists them
    rule("", "pods", "list"),  # a model's pods (as the canary and the autoscaler list them)
)


class KubeLoraPods:
    def __init__(self, api_client: Any, *, key: str = "") -> None:
        self.core = client.CoreV1Api(api_client)
        self.serialize = api_client.sanitize_for_serialization
        self.key = key  # the data plane's key the pods require ("": none)

    def replicas(self, isvc: Mapping[str, Any]) -> tuple[Replica, ...]:
        meta = isvc["metadata"]
        tenant = (meta.get("labels") or {}).get("radixfleet.io/tenant", "")
        selector = f"{ISVC_LABEL}={meta['name']}"
        where = f"{meta['namespace']}/{meta['name']}"
        found = kube_call(f"list pods of {where}", lambda: self.core.list_namespaced_pod(
            meta["namespace"], label_selector=selector))  # fmt: skip
        found_ready = [p for p in self.serialize(found).get("items") or [] if _ready(p)]
        replicas = []
        for pod in found_ready:
            loaded = self._loaded(pod["status"]["podIP"])
            if loaded is not None:
                replicas.append(Replica(pod["status"]["podIP"], tenant, _bound(pod), loaded))
        return tuple(replicas)

    def act(self, namespace: str, action: Action) -> None:
        del namespace  # the pod's IP names it
        body = {"lora_name": action.adapter}
        if action.verb == "load":
            body["lora_path"] = f"/mnt/adapters/{action.adapter}"
        self._post(f"http://{action.replica}:{SGLANG_PORT}/{action.verb}_lora_adapter", body)

    def _loaded(self, ip: str) -> dict[str, float] | None:
        try:
            models = self._get(f"http://{ip}:{SGLANG_PORT}/v1/models")
        except OSError:
            return None
        # When each was loaded is not told: as "long ago", so hysteresis does not hold it.
        return {m["id"]: 0.0 for m in models.get("data", []) if m.get("parent")}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def _get(self, url: str) -> dict[str, Any]:
        request = urllib.request.Request(url, headers=self._headers())
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            found: dict[str, Any] = json.load(answer)
            return found

    def _post(self, url: str, body: Mapping[str, Any]) -> None:
        headers = {"Content-Type": "application/json", **self._headers()}
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(request, timeout=TIMEOUT_S):
            pass


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return bool(status.get("podIP")) and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def _bound(pod: Mapping[str, Any]) -> int:
    """The pod's `--max-loaded-loras` (its container's args), else SGLang's default: as many as
    `--max-loras-per-batch` (8)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        args = list(container.get("args") or [])
        for flag in ("--max-loaded-loras", "--max-loras-per-batch"):
            if flag in args[:-1]:
                return int(args[args.index(flag) + 1])
    return 8
