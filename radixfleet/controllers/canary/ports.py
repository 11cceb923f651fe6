"""The canary controller's Kubernetes ports: three small Protocols and the canary's own error.

InferenceServices (list, move traffic), CanaryPolicies (read, write one rollout's status,
annotate commands) and Baselines (the stable replicas a canary is judged against); Events and
the `KubeError` family (HTTP status kept, a 409 re-read and retried) are the controller kit's
(`radixfleet.kit`). `StaleRevisionError` is the canary's: the canary changed under us, so the
action is dropped. No client library is imported here, so the CLI and the fakes stay light;
`radixfleet/controllers/canary/kube.py` implements the ports on the kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from radixfleet.controllers.canary.spec import POLICY_ANNOTATION
from radixfleet.kit.errors import KubeError


class StaleRevisionError(KubeError):
    """The InferenceService's latest revision is no longer the canary the action was for."""


class InferenceServices(Protocol):
    def in_namespace(self, namespace: str) -> list[dict[str, Any]]: ...

    def set_canary_percent(
        self, namespace: str, name: str, *, percent: int | None, canary_revision: str
    ) -> None:
        """Set canaryTrafficPercent (None removes it) only if `canary_revision` is still latest."""
        ...


class Baselines(Protocol):
    """Kayenta's baseline beside a canary: the stable model on as many replicas as the canary
    has ready (at least one), their metrics labelled `pool="baseline"`, sent as much traffic
    as the canary. Both methods are idempotent: the controller calls one of them every tick."""

    def ensure(
        self, namespace: str, name: str, *, stable_revision: str, canary_revision: str
    ) -> int | None:
        """Size the baseline to the canary; the baseline replicas ready, None when no baseline
        can be made now (the canary is then judged against the stable revision). Raises
        StaleRevisionError when the revisions are no longer these."""
        ...

    def release(self, namespace: str, name: str) -> None:
        """End the baseline, if there is one: its replicas serve as the stable's, or stop."""
        ...


class CanaryPolicies(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_rollout(
        self, namespace: str, name: str, rollout: dict[str, Any], *, generation: int | None = None
    ) -> None:
        """Replace the policy's `status.rollouts` entry of `rollout["inferenceService"]`;
        `generation` is the policy's `metadata.generation` the decision read."""
        ...

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Set annotations on the policy; None removes one."""
        ...


def policy_name(isvc: Mapping[str, Any]) -> str | None:
    """The CanaryPolicy an InferenceService names in its annotation, if any."""
    annotations = isvc.get("metadata", {}).get("annotations") or {}
    name = annotations.get(POLICY_ANNOTATION)
    return str(name) if name else None


def merge_rollout(
    status: Mapping[str, Any], rollout: dict[str, Any], generation: int | None = None
) -> dict[str, Any]:
    """A policy status with `rollout` in place of its InferenceService's entry, and the
    policy's generation the decision read as `observedGeneration` (Kubernetes' convention:
    tools such as kstatus read a status as current only when it equals `metadata.generation`)."""
    key = rollout["inferenceService"]
    others = [r for r in status.get("rollouts", []) if r.get("inferenceService") != key]
    rollouts = sorted([*others, rollout], key=lambda r: str(r["inferenceService"]))
    active = sum(r.get("phase") not in ("Promoted", "RolledBack") for r in rollouts)
    seen = {} if generation is None else {"observedGeneration": generation}
    return {**status, "rollouts": rollouts, "activeRollouts": active, **seen}
