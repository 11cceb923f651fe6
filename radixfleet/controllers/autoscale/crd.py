"""The AutoscalePolicy's CustomResourceDefinition, generated from its spec type (`spec.py`).

The fields, defaults, bounds and CEL rules are the type's; here are the names, the columns
`kubectl get` shows, the descriptions `kubectl explain` shows, and the status schema (data
beside this module: the status types in `state.py` are dataclasses).
"""

from __future__ import annotations

from typing import Any

from radixfleet.controllers.autoscale.spec import API_VERSION, KIND, PLURAL, AutoscalePolicySpec
from radixfleet.kit.crd import AGE, Column, Names, Resource, data, definition
from radixfleet.labels import GROUP

DESCRIPTIONS = {
    "": "How one InferenceService is scaled on SGLang's signals.",
    "inferenceService": "The InferenceService of this namespace that the policy scales.",
    "minReplicas": "Fewest replicas at any time; 0 allows scale-to-zero.",
    "maxReplicas": "Most replicas. The InferenceService's own maxReplicas (what the quota "
    "admitted) caps it too.",
    "intervalSeconds": "Seconds between decisions.",
    "slo": "Per-request objectives; a p95 above one pushes the model up.",
    "targets": "What one ready replica should carry, from SGLang's gauges.",
    "targets.kvUsage": "sglang:token_usage per replica.",
    "targets.queuePerReplica": "sglang:num_queue_reqs a replica may hold before the queue is "
    "demand.",
    "targets.runningPerReplica": "sglang:num_running_reqs per replica; unset, batchFraction of "
    "the batch a replica was seen to saturate at (learned).",
    "targets.batchFraction": "Share of the learned saturation batch a replica should run.",
    "targets.itlFraction": "Share of the ITL SLO the replicas' running/gen_throughput should stay "
    "at.",
    "targets.itlFloorMs": "Decode step of an empty batch (learned when unset).",
    "targets.tolerance": "Relative changes smaller than this are ignored.",
    "idleSeconds": "Seconds without any request before the model may go to zero.",
    "warmPool.schedule": "Floors by time of day; the largest window that holds wins.",
    "warmPool.timeZone": "IANA time zone of the schedule.",
    "warmPool.predictive.replicaRps": "Requests per second one replica serves at the targets "
    "(learned when unset).",
    "coldStart.seconds": "How long a new replica takes to serve; forecasts look this far ahead.",
    "coldStart.budget": "Share of requests that may wait on a cold start before zero is refused.",
    "coldStart.missCostSeconds": "Replica-seconds a request that waits on a cold start is worth.",
    "coldStart.learnIdleWindow": "Learn when zero pays from the model's idle gaps (false - wait "
    "idleSeconds).",
    "cacheAwareDrain": "Remove the replicas whose prefix cache is worth least first.",
    "prewarm": "Send a new replica the model's hottest prompt prefixes before it takes traffic, "
    "while other replicas serve, no request waits for a replica and their queues stay within "
    "targets.queuePerReplica each.",
    "paused": "Leave the replica count where it is.",
}

COLUMNS = (
    Column("InferenceService", "string", ".spec.inferenceService"),
    Column("Min", "integer", ".spec.minReplicas"),
    Column("Max", "integer", ".spec.maxReplicas"),
    Column("Desired", "integer", ".status.desired"),
    Column("Action", "string", ".status.lastDecision.action"),
    AGE,
)


def crd() -> dict[str, Any]:
    """The AutoscalePolicy's CRD."""
    return definition(
        Resource(
            group=GROUP,
            version=API_VERSION,
            names=Names(KIND, PLURAL, short_names=("apol",)),
            scope="Namespaced",
            spec=AutoscalePolicySpec,
            descriptions=DESCRIPTIONS,
            status=data("radixfleet.controllers.autoscale", "status-schema.yaml"),
            columns=COLUMNS,
        )
    )
