"""The data plane: the path of a tenant's request from a region entry to a model's replicas.

Its parts, shared by the cluster's entry (radixfleet/entry/, the process) and the local fleet's
(radixfleet/localfleet/entry.py): `relay` (the application both start from, the error middleware,
the relay of answers and streams), `errors`, `openai` (OpenAI's shapes: errors, model objects,
request ids), `routes` (which revision and pool serve a request, from KServe's traffic status),
`gate` (the port a token gate plugs into), `signals` (Prometheus read through the entry, for the
fleet), `prefixes` (the hottest prompt prefixes, for pre-warming). This module: its own key.

The data plane's own key, shared by the region entry, the routers and the SGLang replicas.

Each tenant namespace holds one Secret, `radixfleet-data-plane`, whose `api-key` SGLang requires
(`--api-key`) of every request but health and metrics, and smg both requires of its callers and
presents to its workers (its `--api-key` is both). Only the data plane knows it: predictor and
router pods read it into their environment, the region entry reads it from the API to call the
routers (and Knative, on the way to a model at zero). Tenants never see it: their own keys stop
at the entry, which never forwards them.

The routers controller creates the Secret, random, the first time it sees an InferenceService in
a namespace, before any predictor pod can need it; it may create Secrets but never read them.
A predictor whose namespace has no such Secret does not start (its pod waits for the Secret):
there is no unauthenticated fallback.

**Rotation without a 401.** SGLang and smg each take one key, read once at start, and smg
presents its own to its workers, so a revision's router and pods must hold the same key for as
long as they run. Each revision is therefore pinned to one key of the Secret by its *name*: the
runtimes read the key the InferenceService's annotation `radixfleet.io/data-plane-key` names
(KServe fills the runtime's placeholder from it; `api-key` without one), and a revision's router
reads the key its revision's pods read. A rotation adds a key to the Secret, annotates the
namespace's InferenceServices with its name (a new revision of each, rolled out as any is), and
removes the old key once no revision that reads it takes traffic. Being a rollout, it needs
the GPUs any rollout needs: the new revision's pods start beside the old ones, within the
tenant's quota (a tenant at its limit stops there, KServe reporting the refusal). The Secret
holds both keys meanwhile: the region entry reads the whole Secret and answers a 401 from a
revision by trying its other key (a 401 comes before any work is done), and the autoscaler's
pre-warmer sends a pod the key its spec reads. Once `api-key` is removed, a model added to the
namespace later must carry the annotation too: without it, its pods wait for a key the Secret
no longer holds (nothing adds the annotation for it yet).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from radixfleet import labels

SECRET = "radixfleet-data-plane"
KEY = "api-key"  # the key a revision reads unless its InferenceService names another
ENV = "RADIXFLEET_DATA_PLANE_KEY"
# Which key of the Secret an InferenceService's revisions read (set to rotate; see above).
KEY_ANNOTATION = f"{labels.GROUP}/data-plane-key"
# The runtimes' key name, a Go template KServe fills from the InferenceService's metadata
# (its `ReplacePlaceholders`, as `{{.Name}}`): the annotation's value, else `api-key`. The
# annotation's name is a raw string (backquotes): KServe renders the container as JSON first,
# where a double quote would be escaped and break the template.
KEY_PLACEHOLDER = (
    "{{with index .Annotations `" + KEY_ANNOTATION + "`}}{{.}}{{else}}" + KEY + "{{end}}"
)


ROUTER_SUFFIX = "-router"
# Where the entry reaches a revision's router, and the router its pods: the ports every part
# of the path agrees on (the routers controller's objects, the entry, the tenant namespaces'
# NetworkPolicies, the pre-warmer).
ROUTER_PORT = 8000  # smg's HTTP port; its Service's too
ROUTER_METRICS_PORT = 29000  # smg's Prometheus exporter
QUEUE_PROXY_PORT = 8012  # Knative's queue-proxy, in front of every serving pod's container
# SGLang's own port in every runtime (radixfleet/render/runtimes.py): a Standard-mode pod has no
# queue-proxy, so its router sends straight to it.
PREDICTOR_PORT = 8080


def routes_for(revision: str, pool: str = labels.SERVING_POOL) -> str:
    """What a router routes to, as its objects are labelled: the revision's `serving` pods, or
    `<revision>-<pool>` for a pool with a router of its own (a canary's `baseline`)."""
    return revision if pool == labels.SERVING_POOL else f"{revision}-{pool}"


def router_name(revision: str, pool: str = labels.SERVING_POOL) -> str:
    """`<revision>-router` (`<revision>-baseline-router`): the Deployment and Service the
    routers controller makes, where the region entry sends the revision's requests."""
    return routes_for(revision, pool) + ROUTER_SUFFIX


def env_var(key: str = KEY) -> dict[str, Any]:
    """The container environment variable holding the key named `key` of the namespace's
    Secret (the runtimes pass `KEY_PLACEHOLDER`; a router, its revision's `key_name`)."""
    return {"name": ENV, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": key}}}


def key_name(pod_spec: Mapping[str, Any]) -> str | None:
    """The Secret key a pod spec's containers read the data plane's key from (a Revision's:
    the placeholder filled), or None if none reads it."""
    for container in pod_spec.get("containers") or []:
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
            if env.get("name") == ENV and ref.get("name") == SECRET and ref.get("key"):
                return str(ref["key"])
    return None


def api_key_args() -> list[str]:
    """`--api-key` with the key, as both SGLang and smg take it (Kubernetes expands `$(ENV)`).

    One argument, `--api-key=KEY`: given as two, a key that begins with a dash reads to their
    argument parsers as another flag, and the process exits at start ("expected one argument"),
    which a router did in one test cluster whose random key began with "-"."""
    return [f"--api-key=$({ENV})"]


def secret(namespace: str, *, key: str | None = None) -> dict[str, Any]:
    """The Secret of `namespace`, with a fresh random key unless one is given."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": SECRET,
            "namespace": namespace,
            "labels": {labels.MANAGED_BY: labels.MANAGER},
        },
        # Hex: no dash to begin with, nothing a shell or a header needs to quote.
        "stringData": {KEY: key or secrets.token_hex(32)},
    }


def bearer(key: str) -> dict[str, str]:
    """The header that carries the key."""
    return {"Authorization": f"Bearer {key}"}
