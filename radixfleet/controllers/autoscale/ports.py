"""The autoscaler's Kubernetes ports: small Protocols.

InferenceServices (read one), Revisions (read one, set its scale bounds), Pods (a revision's,
and their deletion cost), AutoscalePolicies (read, write status) and a Waker (one request
through the activator). Errors and Events are the controller kit's (`radixfleet.kit.errors`,
`radixfleet.kit.events`). No client library is imported here;
`radixfleet/controllers/autoscale/kube.py` implements the ports on the kubernetes client, `fakes.py`
in memory.
"""

from __future__ import annotations

from typing import Any, Protocol


class InferenceServices(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Revisions(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def set_scale(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Set the scale annotations on the Revision and on its PodAutoscaler (same name)."""
        ...


class Pods(Protocol):
    def of_revision(self, namespace: str, revision: str) -> list[dict[str, Any]]: ...

    def set_deletion_cost(self, namespace: str, name: str, cost: int) -> None: ...


class AutoscalePolicies(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the policy's status through the status subresource."""
        ...


class Waker(Protocol):
    def wake(self, url: str) -> None:
        """Send one request through the activator at `url`, which wakes a revision at zero.

        Raising min-scale alone does not wake a revision that Knative has scaled to zero
        (knative/serving#10327); a request does, and min-scale then keeps the pods.
        """
        ...
