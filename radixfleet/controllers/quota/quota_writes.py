"""The admission policy that holds the operator's ResourceQuota writes to the quota's own.

The quota controller caps the GPUs of every namespace a Tenant names with a ResourceQuota
`radixfleet-gpus` (controller.py), a Tenant applied by hand included. RBAC cannot scope a verb to
namespaces nobody knows in advance, so the operator's ClusterRole creates and patches
ResourceQuotas in every namespace, and a leaked operator token could cap `kube-system` to no pods
at all. This ValidatingAdmissionPolicy admits the operator's ResourceQuota writes only of
`radixfleet-gpus`, labelled as radixfleet's, and never in a namespace of Kubernetes or of the
platform (those no Tenant may claim: `radixfleet.platform.RESERVED_NAMESPACES` and every
`kube-` one). Anyone else's ResourceQuota writes are RBAC's alone, untouched here.

`admits` is the rule in Python; `tests/quota/test_quota_writes.py` evaluates the CEL against it,
and `tests/cluster/test_admission.py` has the API server enforce it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from radixfleet import labels
from radixfleet.controllers.quota.spec import QUOTA_NAME
from radixfleet.platform import (
    OPERATOR_NAME,
    PLATFORM_NAMESPACE,
    RESERVED_NAMESPACE_PREFIX,
    RESERVED_NAMESPACES,
)

POLICY_NAME = "operator-resourcequotas.radixfleet.io"
OPERATOR = f"system:serviceaccount:{PLATFORM_NAMESPACE}:{OPERATOR_NAME}"


def admits(user: str, namespace: str, quota: Mapping[str, Any]) -> bool:
    """Whether `user` may create or update ResourceQuota `quota` in `namespace`."""
    if user != OPERATOR:
        return True
    meta = quota.get("metadata") or {}
    ours = (meta.get("labels") or {}).get(labels.MANAGED_BY) == labels.MANAGER
    platform = namespace in RESERVED_NAMESPACES or namespace.startswith(RESERVED_NAMESPACE_PREFIX)
    return meta.get("name") == QUOTA_NAME and ours and not platform


RESERVED = json.dumps(sorted(RESERVED_NAMESPACES))
ADMITS = (
    f"request.userInfo.username != '{OPERATOR}' || ("
    f"object.metadata.name == '{QUOTA_NAME}'"
    f" && has(object.metadata.labels) && '{labels.MANAGED_BY}' in object.metadata.labels"
    f" && object.metadata.labels['{labels.MANAGED_BY}'] == '{labels.MANAGER}'"
    f" && !(request.namespace in {RESERVED})"
    f" && !request.namespace.startsWith('{RESERVED_NAMESPACE_PREFIX}'))"
)


WRITES = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["resourcequotas"],
}
REFUSAL = (
    f"the radixfleet operator writes only ResourceQuota {QUOTA_NAME}, its own, in a tenant's "
    "namespace"
)


def policy() -> dict[str, Any]:
    validation = {"expression": ADMITS, "message": REFUSAL, "reason": "Forbidden"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [WRITES]},
            "validations": [validation],
        },
    }


def binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    }


def manifests() -> list[dict[str, Any]]:
    return [policy(), binding()]
