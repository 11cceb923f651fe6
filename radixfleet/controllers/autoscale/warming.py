"""Pre-warming in a cluster: a new pod of the serving revision leaves its router's selection
before it is ready, is sent the model's hottest prefixes once ready, and comes back.

Every predictor pod starts `radixfleet.io/pool: serving` (the InferenceService's predictor
labels), and a revision's router, smg, sends only to `serving` pods of it
(radixfleet/controllers/routers: its Kubernetes discovery drops a pod that leaves the selector and
adds one that joins it). At each of the autoscaler's timer calls (every second) `Warmer.tick` reads
the serving revision's pods (once it found them all ready and serving, only when a pod may have
come: the autoscaler asked for more than are ready or saw one starting; or after `RELOOK_S`) and
carries out `prewarm.gate`:

- a pod not ready yet, never taken out, while the others may serve without it: relabelled
  `warming`, so that when it turns ready no request reaches it through the router;
- a `warming` pod, ready: warmed in the background. The region entry gives the hottest
  prefixes of the model's prompts (radixfleet/dataplane/prefixes.py, within the spec's share of the
  pod's KV cache, which the pod's `/server_info` says), and the pod is sent each as one request
  of one output token, through its queue-proxy with the data plane's key; then it is
  `serving` again, `radixfleet.io/prewarmed` saying what it got;
- a `warming` pod that may no longer be held back, or is past the deadline: `serving` at once.

State lives on the pods (label and annotation), so a restarted controller releases or warms
again what it finds. What fails (no entry, no key, a pod that does not answer) releases the pod
cold: pre-warming only ever delays a pod's first request by the deadline, and a request that
would wait for the pod ends the delay. Knative's own path (the activator, the revision's
Service) does not look at the label: while the router has no pod at all the entry sends that
way, and `gate` never holds back a model's only pod.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from radixfleet import dataplane, labels
from radixfleet.controllers.autoscale.prewarm import Gate, PodView, gate
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import Observed
from radixfleet.kit.errors import KubeError
from radixfleet.prefixes import kv_blocks
from radixfleet.twin.interfaces import Waiting

log = logging.getLogger(__name__)

WARMED = f"{labels.GROUP}/prewarmed"  # annotation: what a pod was sent, or why not
WARMERS = 4  # pods warmed at once, fleet-wide
# A revision whose pods were all ready and serving is listed again only when a pod may have
# come (the autoscaler asked for more than are ready, or saw one starting), or after this long:
# a timer call a second per policy must not list pods a second per policy.
RELOOK_S = 60.0


class WarmPods(Protocol):
    def of_revision(self, namespace: str, revision: str) -> list[dict[str, Any]]: ...

    def set_pool(self, namespace: str, name: str, pool: str, note: str | None = None) -> None:
        """Label the pod's pool (and annotate `WARMED` with `note`)."""
        ...


class DataPlaneKeys(Protocol):
    def key(self, namespace: str, name: str = dataplane.KEY) -> str | None:
        """The value of the key `name` of the namespace's data-plane Secret; None if missing."""
        ...


class WarmUpClient(Protocol):
    """The HTTP calls of a warm-up (radixfleet/controllers/autoscale/kube.py: HttpWarmUp)."""

    def hottest(
        self, namespace: str, model: str, *, key: str, kv_blocks: int, kv_fraction: float,
        min_hits: float,
    ) -> list[str]: ...  # fmt: skip

    def kv_tokens(self, pod_url: str, *, key: str) -> int: ...

    def prefill(self, pod_url: str, text: str, *, key: str, timeout_s: float) -> None: ...


@dataclass
class Warmer:
    """Carries out `prewarm.gate` on a cluster; `tick` once per timer call and policy."""

    pods: WarmPods
    keys: DataPlaneKeys
    http: WarmUpClient
    clock: Callable[[], float] = time.monotonic
    # Through Knative's queue-proxy: Knative counts the warm-up's requests as the pod's.
    pod_port: int = dataplane.QUEUE_PROXY_PORT
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(WARMERS, thread_name_prefix="prewarm")
    )
    running: dict[tuple[str, str], Future[None]] = field(default_factory=dict)
    # (namespace, revision) -> when its pods were last found all ready, nothing to do
    settled_at: dict[tuple[str, str], float] = field(default_factory=dict)
    # kopf runs each policy's timer on its own thread: the running warm-ups are shared.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tick(
        self, namespace: str, spec: AutoscalePolicySpec, revision: str | None,
        observed: Observed | None, *, now: datetime, desired: int | None = None,
    ) -> None:  # fmt: skip
        """Hold, warm or release the serving revision's pods (see the module docstring);
        `desired` is the count the autoscaler last asked for."""
        if revision is None:
            return
        with self.lock:  # before the pods are read: a warm-up done since has put its pod back
            for key in [k for k, job in self.running.items() if job.done()]:
                del self.running[key]
            warming = frozenset(name for (ns, name) in self.running if ns == namespace)
            if not self._must_look((namespace, revision), observed, desired, warming):
                return
        found = self.pods.of_revision(namespace, revision)
        views = [pod_view(p, now) for p in found]
        decided = gate(
            views, waiting=waiting_of(observed, found), spec=spec.prewarm,
            allowance=spec.targets.queue_per_replica, warming_now=warming,
        )  # fmt: skip
        self._act(namespace, spec, found, decided)
        ready = all(v.ready_for_s is not None for v in views)
        settled = decided == Gate() and not warming and ready
        with self.lock:
            if settled:
                self.settled_at[(namespace, revision)] = self.clock()
            else:
                self.settled_at.pop((namespace, revision), None)

    def _must_look(
        self, key: tuple[str, str], observed: Observed | None, desired: int | None,
        warming: frozenset[str],
    ) -> bool:  # fmt: skip
        """Whether the revision's pods must be listed: not found settled within RELOOK_S, a
        warm-up under way, or a pod on its way (asked for or seen starting)."""
        since = self.settled_at.get(key)
        if since is None or self.clock() - since >= RELOOK_S or warming:
            return True
        if observed is None:
            return True
        return observed.starting > 0 or (desired or 0) > observed.ready

    def _act(
        self, namespace: str, spec: AutoscalePolicySpec, found: Sequence[Mapping[str, Any]],
        decided: Gate,
    ) -> None:  # fmt: skip
        for name in decided.hold:
            self.pods.set_pool(namespace, name, labels.WARMING_POOL)
            log.info("pod %s/%s out of its router until warmed", namespace, name)
        for name, why in decided.release:
            self.pods.set_pool(namespace, name, labels.SERVING_POOL, why)
            log.info("pod %s/%s back to its router: %s", namespace, name, why)
        by_name = {p["metadata"]["name"]: p for p in found}
        for name in decided.warm:
            ip = (by_name[name].get("status") or {}).get("podIP")
            # The key the pod started with: during a rotation its revision's, old or new.
            held = dataplane.key_name(by_name[name].get("spec") or {}) or dataplane.KEY
            job = self.executor.submit(self._warm, namespace, spec, name, str(ip), held)
            with self.lock:
                self.running[(namespace, name)] = job

    def _warm(
        self, namespace: str, spec: AutoscalePolicySpec, name: str, ip: str, key_name: str
    ) -> None:
        """Send the pod the model's hottest prefixes, then put it back, whatever happened."""
        started, note = self.clock(), "nothing sent"
        try:
            url = f"http://{ip}:{self.pod_port}"
            note = self._send(namespace, spec, url, started, key_name)
        except Exception as error:  # anything at all: the pod must not stay out
            note = f"not warmed: {error}"[:200]
            log.warning("warm-up of %s/%s failed: %s", namespace, name, error)
        finally:
            self._release(namespace, name, note)

    def _send(
        self, namespace: str, spec: AutoscalePolicySpec, url: str, started: float, key_name: str
    ) -> str:
        key = self.keys.key(namespace, key_name)
        if key is None:
            return f"not warmed: no data-plane key {key_name!r}"
        blocks = kv_blocks(self.http.kv_tokens(url, key=key))
        texts = self.http.hottest(
            namespace, spec.inference_service, key=key, kv_blocks=blocks,
            kv_fraction=spec.prewarm.kv_fraction, min_hits=spec.prewarm.min_hits,
        )  # fmt: skip
        sent = 0
        for text in texts:
            left = spec.prewarm.deadline_seconds - (self.clock() - started)
            if left <= 0:
                break
            self.http.prefill(url, text, key=key, timeout_s=left)
            sent += 1
        return f"{sent} of {len(texts)} prefixes in {self.clock() - started:.1f} s"

    def _release(self, namespace: str, name: str, note: str) -> None:
        try:
            self.pods.set_pool(namespace, name, labels.SERVING_POOL, note)
            log.info("pod %s/%s warmed (%s)", namespace, name, note)
        except KubeError as error:  # the next tick finds it `warming`: warmed again, then back
            log.warning("pod %s/%s not put back yet: %s", namespace, name, error)


def pod_view(pod: Mapping[str, Any], now: datetime) -> PodView:
    """A pod as `prewarm.gate` reads it: pool label, how long ready, warmed once already, and
    whether it is a prefill/decode role (the catalog's role label on its predictor)."""
    meta = pod.get("metadata") or {}
    pod_labels = meta.get("labels") or {}
    ready = next(
        (c for c in (pod.get("status") or {}).get("conditions") or []
         if c.get("type") == "Ready" and c.get("status") == "True"),
        None,
    )  # fmt: skip
    ready_for = None
    if ready is not None and not meta.get("deletionTimestamp"):
        since = _time(ready.get("lastTransitionTime"))
        ready_for = max(0.0, (now - since).total_seconds()) if since else 0.0
    return PodView(
        name=str(meta.get("name", "")),
        pool=str(pod_labels.get(labels.POOL, "")),
        ready_for_s=ready_for,
        warmed=WARMED in (meta.get("annotations") or {}),
        pd_role=labels.PD_ROLE in pod_labels,
    )


def waiting_of(observed: Observed | None, pods: Sequence[Mapping[str, Any]]) -> Waiting | None:
    """Requests held for want of a replica and queued at the serving pods, from the
    autoscaler's last look; None when it had none or its metrics were missing. Held requests
    unmeasured (no `waiting` query set) count none: Knative's activator holds a revision's
    requests while no pod can take them, and a pod is only held back while others serve."""
    if observed is None or observed.metrics_error is not None:
        return None
    serving = {
        (p.get("metadata") or {}).get("name")
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(labels.POOL) == labels.SERVING_POOL
    }
    queued = sum(r.queued or 0.0 for r in observed.replicas if r.name in serving)
    return Waiting(held=math.ceil(observed.waiting or 0.0), queued=math.ceil(queued))


def _time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
