"""How a desired replica count becomes Knative scale bounds, without a new revision.

KServe renders an InferenceService's minReplicas/maxReplicas (and its annotations) into the
Knative Service's revision template, and any change to that template is a new Revision: new
pods, cold caches, a rollout. So the autoscaler never touches the InferenceService. It writes
`autoscaling.knative.dev/min-scale` and `max-scale` on the serving Revision itself (Knative
propagates a Revision's annotation changes to its PodAutoscaler since knative/serving#16186) and
on that PodAutoscaler (which older releases read directly; the Revision reconciler does not
revert PA annotations there). Neither bumps a generation nor creates a revision.

- desired >= 1: min-scale = max-scale = desired. The KPA keeps exactly that many pods; its own
  concurrency decision only matters inside the bounds, and they leave it no room.
- desired == 0: min-scale 0, max-scale = the ceiling. The KPA itself removes the last pod once
  its own window has seen no request (ours has seen none for the idle window), and wakes the
  revision through the activator on the next request, sizing the first step for the requests
  it holds. Scale-to-zero keeps working even while this controller is down.

Which pod goes on a scale-down is the ReplicaSet's choice; `controller.kubernetes.io/
pod-deletion-cost` (lower goes first) is how the cache-aware order reaches it. Knative's
queue-proxy drains a terminating pod: it stops taking requests and lets running streams finish
within the revision's timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_SCALE = "autoscaling.knative.dev/min-scale"
MAX_SCALE = "autoscaling.knative.dev/max-scale"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
REVISION_LABEL = "serving.knative.dev/revision"
# Distance between neighbours in the drain order, so a later pod can be placed between two.
COST_STEP = 10


def scale_bounds(desired: int, ceiling: int) -> tuple[int, int]:
    """(min-scale, max-scale) that carry `desired` out, as the module docstring says."""
    if desired <= 0:
        return 0, max(ceiling, 1)
    return desired, desired


def scale_annotations(desired: int, ceiling: int) -> dict[str, str]:
    """The Revision's (and PodAutoscaler's) annotations for `desired`."""
    low, high = scale_bounds(desired, ceiling)
    return {MIN_SCALE: str(low), MAX_SCALE: str(high)}


def deletion_costs(drain_order: Sequence[str]) -> dict[str, int]:
    """Pod deletion costs that make the ReplicaSet remove pods in `drain_order`, first first."""
    return {pod: index * COST_STEP for index, pod in enumerate(drain_order)}
