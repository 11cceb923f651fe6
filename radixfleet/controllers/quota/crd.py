"""The Tenant's CustomResourceDefinition, generated from its spec type (`spec.py`).

The fields, defaults, bounds and CEL rules are the type's; here are the names, the columns
`kubectl get` shows, the descriptions `kubectl explain` shows, and the status schema (data
beside this module: the status types in `state.py` are dataclasses).
"""

from __future__ import annotations

from typing import Any

from radixfleet.controllers.quota.spec import (
    API_VERSION,
    KIND,
    LABEL_PATTERN,
    PLURAL,
    TenantSpec,
)
from radixfleet.kit.crd import AGE, Column, Names, Resource, data, definition
from radixfleet.labels import GROUP

DESCRIPTIONS = {
    "": "What one team may use of the fleet.",
    "namespaces": "The namespaces whose InferenceServices count against this tenant. A "
    "namespace claimed by two tenants stays with the older one; the newer one reports "
    "NamespacesClaimed=False.",
    "gpuBudget": "GPUs per GPU type, counted as maxReplicas x GPUs per replica over the "
    "tenant's InferenceServices. `guaranteed` is always admissible; up to `borrow` more may be "
    "admitted out of what other tenants leave unused.",
    "tokenBudget": "Tokens per minute (prompt and completion) on the request path: overall, and "
    "optionally per model (the InferenceService name). Past it the region entry answers 429 "
    "with Retry-After. No tokenBudget: unlimited.",
    "priority": "Higher is more important (0-1000).",
    "apiKeys": "Secrets holding the tenant's API keys (several, to rotate: add the new one, move "
    "the clients, remove the old one or let it expire). A missing Secret or key is reported as "
    "ApiKeysResolved=False.",
    "apiKeys[].expiresAt": "When the region entries stop accepting this key (RFC 3339).",
}

_READY = '.status.conditions[?(@.type=="Ready")]'
COLUMNS = (
    Column("Namespaces", "string", ".spec.namespaces"),
    Column("Priority", "integer", ".spec.priority"),
    Column("Ready", "string", f"{_READY}.status"),
    Column("Reason", "string", f"{_READY}.reason", priority=1),
    Column("Running GPUs", "integer", ".status.runningGpus"),
    AGE,
)
# The name is the tenant's label value (radixfleet.io/tenant) and a metric label.
METADATA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 63, "pattern": LABEL_PATTERN}},
}


def crd() -> dict[str, Any]:
    """The Tenant's CRD."""
    return definition(
        Resource(
            group=GROUP,
            version=API_VERSION,
            names=Names(KIND, PLURAL, short_names=("tnt",)),
            scope="Cluster",
            spec=TenantSpec,
            descriptions=DESCRIPTIONS,
            status=data("radixfleet.controllers.quota", "status-schema.yaml"),
            columns=COLUMNS,
            metadata=METADATA,
        )
    )
