"""The canary's objects in a catalog's manifests: one CanaryPolicy per policy a served model
names, in the model's namespace (`radixfleet render` and `pulumi up` both write them, through
`radixfleet.kit.registry.catalog_objects`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from radixfleet import labels
from radixfleet.config.catalog import Catalog
from radixfleet.config.serving import Served, namespace_of
from radixfleet.controllers.canary.spec import API_VERSION, KIND, CanaryPolicySpec


def canary_policy(name: str, namespace: str) -> dict[str, Any]:
    """A CanaryPolicy with the platform's default steps and checks
    (radixfleet/controllers/canary/spec.py), judged beside a baseline: in a cluster one costs no GPU
    (it is carved out of the stable revision's pods), and it is the judge that rolls a twice-slower
    canary back within two intervals (radixfleet/controllers/canary/README.md). The type's own
    default stays off: in the local fleet and the twin a baseline runs replicas of its own."""
    return {
        "apiVersion": f"{labels.GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {labels.MANAGED_BY: labels.MANAGER},
        },
        "spec": CanaryPolicySpec(baseline=True).model_dump(
            by_alias=True, mode="json", exclude_none=True
        ),
    }


def catalog_objects(catalog: Catalog, served: Iterable[Served]) -> list[dict[str, Any]]:
    """One CanaryPolicy per (namespace, policy) the served models name."""
    del catalog  # every policy is named by a served model
    wanted = {(namespace_of(t), m.canary_policy) for m, t in served if m.canary_policy}
    return [canary_policy(policy, namespace) for namespace, policy in sorted(wanted)]
