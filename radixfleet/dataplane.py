"""The data plane's own key, shared by the region entry, the routers and the SGLang replicas.

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
"""

from __future__ import annotations

import secrets
from typing import Any

from radixfleet import labels

SECRET = "radixfleet-data-plane"
KEY = "api-key"
ENV = "RADIXFLEET_DATA_PLANE_KEY"


ROUTER_SUFFIX = "-router"


def routes_for(revision: str, pool: str = labels.SERVING_POOL) -> str:
    """What a router routes to, as its objects are labelled: the revision's `serving` pods, or
    `<revision>-<pool>` for a pool with a router of its own (a canary's `baseline`)."""
    return revision if pool == labels.SERVING_POOL else f"{revision}-{pool}"


def router_name(revision: str, pool: str = labels.SERVING_POOL) -> str:
    """`<revision>-router` (`<revision>-baseline-router`): the Deployment and Service the
    routers controller makes, where the region entry sends the revision's requests."""
    return routes_for(revision, pool) + ROUTER_SUFFIX


def env_var() -> dict[str, Any]:
    """The container environment variable holding the key (from the namespace's Secret)."""
    return {"name": ENV, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": KEY}}}


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
