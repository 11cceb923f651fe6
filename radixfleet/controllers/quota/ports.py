"""The quota controller's Kubernetes ports: four small Protocols.

Tenants (list, write status), InferenceServices (list everywhere), the one ResourceQuota per
namespace (read, set) and API-key Secrets (read one key). Errors are the controller kit's
`KubeError` family (`radixfleet.kit.errors`), which keeps the HTTP status. No client library is
imported here; `radixfleet/controllers/quota/kube.py` implements the ports on the kubernetes client,
`fakes.py` in memory.
"""

from __future__ import annotations

from typing import Any, Protocol

from radixfleet.controllers.quota.spec import SecretKeyRef


class Tenants(Protocol):
    def list(self) -> list[dict[str, Any]]: ...

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        """Replace the Tenant's whole status (stale commitments must disappear)."""
        ...


class InferenceServices(Protocol):
    def everywhere(self) -> list[dict[str, Any]]: ...


class ResourceQuotas(Protocol):
    def get(self, namespace: str) -> dict[str, Any] | None:
        """The controller's ResourceQuota in `namespace`, None when there is none."""
        ...

    def set_hard(self, namespace: str, *, tenant: str, gpus: int) -> None:
        """Create the ResourceQuota or change its `requests.nvidia.com/gpu`."""
        ...


class Secrets(Protocol):
    def key(self, ref: SecretKeyRef) -> str | None:
        """The API key a reference names; None when the Secret or its key is missing."""
        ...
