"""The FailoverPolicy's CustomResourceDefinition, generated from its spec type (`spec.py`).

The fields, defaults, bounds and CEL rules are the type's; here are the names, the columns
`kubectl get` shows, the descriptions `kubectl explain` shows, and the status schema (data
beside this module: the status types in `state.py` are dataclasses).
"""

from __future__ import annotations

from typing import Any

from radixfleet.controllers.failover.spec import API_VERSION, KIND, PLURAL, FailoverPolicySpec
from radixfleet.kit.crd import AGE, Column, Names, Resource, data, definition
from radixfleet.labels import GROUP

DESCRIPTIONS = {
    "": "Regions behind one weighted name, the signals that judge them, and the pacing.",
    "hostedZoneId": "The Route 53 hosted zone holding the weighted records.",
    "recordName": "The global name, `<model>.<domain>`, with one weighted record per region.",
    "models": "InferenceServices (SGLang's model_name) served under the name: their signals "
    "judge a region, and their floors are raised where traffic is about to go.",
    "namespaces": "Where the models' InferenceServices run (one per tenant serving the model "
    "under this name); empty means the policy's own namespace.",
    "regions[].weight": "The record's weight while healthy; 0 makes a standby region.",
    "regions[].setIdentifier": "The weighted record's set identifier (default the region's name).",
    "regions[].prometheusUrl": "The region's Prometheus (default from the controller's URL "
    "template).",
    "intervalSeconds": "Seconds between judgements; one judgement is one interval.",
    "signals": "What makes an interval bad for a region; one failing signal is enough.",
    "signals.windowSeconds": "The window of every rate.",
    "signals.minAvailability": "Least share of the models' routers and replicas answering their "
    "scrape.",
    "signals.maxErrorRate": "Largest share of failed requests.",
    "signals.ttftSloSeconds": "A request is in its TTFT SLO when its first token comes this soon.",
    "signals.ttftObjective": "Share of requests the SLO promises within ttftSloSeconds.",
    "signals.maxTtftBurnRate": "Largest burn rate of the TTFT error budget (bad share / (1 - "
    "objective)).",
    "signals.minRequests": "Requests in the window below which rates are not judged.",
    "signals.useHealthChecks": "Count a Route 53 health check reporting unhealthy as a bad "
    "interval.",
    "unreachableAfter": "Intervals in a row in which no one outside can reach a region before "
    "its traffic moves out.",
    "unhealthyAfter": "Bad intervals in a row before a region's traffic moves out.",
    "healthyAfter": "Good intervals in a row before a region starts getting traffic back.",
    "minHoldSeconds": "Least time a region stays out once its traffic moved out.",
    "failback.stepPercent": "Share of the region's weight given back per step.",
    "failback.stepSeconds": "Least time between failback steps.",
    "prescale.headroom": "Floors are the new traffic share of the steady-state replicas times "
    "this.",
    "prescale.maxWaitSeconds": "How long a region that is slow but still serving keeps its "
    "traffic while the survivors' raised floors become ready.",
    "paused": "Judge and report, but change no weight and no floor.",
}

COLUMNS = (
    Column("Record", "string", ".spec.recordName"),
    Column("Weights", "string", ".status.weights"),
    Column("Healthy", "integer", ".status.healthyRegions", "Regions judged healthy"),
    Column("Paused", "boolean", ".spec.paused"),
    AGE,
)


def crd() -> dict[str, Any]:
    """The FailoverPolicy's CRD."""
    return definition(
        Resource(
            group=GROUP,
            version=API_VERSION,
            names=Names(KIND, PLURAL, short_names=("fopol",)),
            scope="Namespaced",
            spec=FailoverPolicySpec,
            descriptions=DESCRIPTIONS,
            status=data("radixfleet.controllers.failover", "status-schema.yaml"),
            columns=COLUMNS,
        )
    )
