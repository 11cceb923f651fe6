"""TEST HELPER, NOT A NETWORKING LAYER: marks Knative's KIngress objects ready without routing.

Knative Serving needs a KIngress implementation (a networking layer) before any Route, and so any
Knative Service or Serverless InferenceService, becomes ready. Every usual one runs Envoy, which
cannot be built here, and the pure-Go candidate does not work yet (Traefik v3.6 ignores the
per-backend header filters that net-gateway-api relies on; see ``testbed/NETWORKING.md``).

So in the test cluster nothing routes by host name. This helper plays the networking layer's
bookkeeping only: it writes the status a real one would write once its proxies are configured, and
points the Route's cluster-local name at the revision that takes most of the traffic. With it:

- Knative Routes, Services and KServe's Serverless InferenceServices become Ready;
- ``http://<revision>.<namespace>.svc.cluster.local`` reaches the revision, through the activator
  when it has no pods (the activator reads the revision from that host name), so scale-from-zero
  can be tested by calling the revision's own name;
- the Route's own name (``<ksvc>.<namespace>.svc.cluster.local``) reaches the revision's Service
  only while the revision has pods and the activator is out of the path (the activator cannot tell
  the revision from that host name and answers 404);
- traffic splits (``canaryTrafficPercent``), tags and external domains are NOT implemented.

A test that relies on it must say so; nothing outside the test bed may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

Obj = dict[str, Any]

GROUP, VERSION, PLURAL = "networking.internal.knative.dev", "v1alpha1", "ingresses"
READY_CONDITIONS = ("LoadBalancerReady", "NetworkConfigured", "Ready")


class KIngresses(Protocol):
    """What the helper needs of the Kubernetes API (an adapter the cluster fixture provides)."""

    def list_all(self) -> list[Obj]: ...

    def patch_status(self, namespace: str, name: str, status: Obj) -> None: ...


def ready_status(ingress: Mapping[str, Any], *, now: str) -> Obj | None:
    """The status that declares ``ingress`` ready, or None when it already says so.

    ``now`` is the RFC 3339 time written into the conditions.
    """
    generation = ingress["metadata"].get("generation", 1)
    target = _main_backend(ingress)
    balancer = {"ingress": [{"domainInternal": target}]}
    status: Obj = {
        "observedGeneration": generation,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now} for kind in READY_CONDITIONS
        ],
        "publicLoadBalancer": balancer,
        "privateLoadBalancer": balancer,
    }
    return None if _already(ingress.get("status") or {}, generation, balancer) else status


def mark_all_ready(api: KIngresses, *, now: str) -> list[str]:
    """Declare every KIngress that is not yet ready ready; return the ``namespace/name`` changed."""
    changed = []
    for ingress in api.list_all():
        status = ready_status(ingress, now=now)
        if status is not None:
            meta = ingress["metadata"]
            api.patch_status(meta["namespace"], meta["name"], status)
            changed.append(f"{meta['namespace']}/{meta['name']}")
    return changed


def _main_backend(ingress: Mapping[str, Any]) -> str:
    """The cluster-local name of the revision Service with most of the first path's traffic."""
    namespace = ingress["metadata"]["namespace"]
    rules = ingress.get("spec", {}).get("rules") or []
    paths = (rules[0].get("http", {}).get("paths") or []) if rules else []
    splits = (paths[0].get("splits") or []) if paths else []
    if not splits:
        return f"{ingress['metadata']['name']}.{namespace}.svc.cluster.local"
    main = max(splits, key=lambda split: split.get("percent", 0))
    return f"{main['serviceName']}.{main.get('serviceNamespace', namespace)}.svc.cluster.local"


def _already(status: Mapping[str, Any], generation: int, balancer: Obj) -> bool:
    ready = {c["type"] for c in status.get("conditions", []) if c.get("status") == "True"}
    return (
        status.get("observedGeneration") == generation
        and ready >= set(READY_CONDITIONS)
        and status.get("privateLoadBalancer") == balancer
    )
