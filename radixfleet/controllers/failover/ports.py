"""The failover controller's ports besides Route 53 and Prometheus: policy status and floors.

Events and the `KubeError` family (HTTP status kept; `temporary` for what a later attempt can
fix) are the controller kit's (`radixfleet.kit`): one place for each idea. `Floors` is how pre-
scaling reaches a region: raise a model's floor there, and give it back later. No client library
is imported here.
"""

from __future__ import annotations

from typing import Any, Protocol


class FailoverPolicies(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the policy's status (through the status subresource)."""
        ...


class Floors(Protocol):
    """The least replica count of a model in a region, as the failover asks for it."""

    def raise_floor(self, region: str, model: str, replicas: int) -> None:
        """Keep at least `replicas` ready (never lowers a floor someone else set higher)."""
        ...

    def release_floor(self, region: str, model: str) -> None:
        """Drop the failover's floor; the model's own bounds apply again."""
        ...
