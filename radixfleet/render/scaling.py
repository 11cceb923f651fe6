"""Knative scaling targets for an InferenceService, derived from the replica profile and the SLO.

KServe maps `scaleMetric: concurrency` and `scaleTarget` to Knative's per-replica concurrency
target; Knative then keeps in-flight requests per replica near `target x 70 %` (its default
target utilisation). An SGLang replica serves all its in-flight requests in one continuous batch,
so the right target is the largest batch it can hold while both are true:

- the inter-token latency SLO holds: every decode step of a batch of B requests with L context
  tokens takes `decode_overhead + per_request x B + per_context_token x L` (CALIBRATION.md), and
  with L = B x typical_request_tokens that step must stay within `slo.itl_p95_ms`;
- the KV cache holds them: B x typical_request_tokens <= the replica's KV capacity (otherwise
  SGLang queues or retracts requests and TTFT explodes);

and never above SGLang's own `max_running_requests`. The TTFT SLO is guarded by the autoscaler
(radixfleet/controllers/autoscale) on queue depth, which this static target cannot see.
"""

from __future__ import annotations

import math

from radixfleet.config.catalog import Model
from radixfleet.config.sizing import kv_capacity_tokens
from radixfleet.profile import ReplicaProfile


def itl_bound(model: Model, profile: ReplicaProfile) -> int:
    """Largest batch whose decode step stays within the inter-token latency SLO."""
    budget = model.slo.itl_p95_ms / 1000 - profile.decode_overhead_s
    per_request = (
        profile.decode_per_request_s
        + profile.decode_per_context_token_s * model.typical_request_tokens
    )
    return max(0, math.floor(budget / per_request))


def kv_bound(model: Model) -> int:
    """Largest batch of typical requests whose KV cache fits one replica."""
    return kv_capacity_tokens(model) // model.typical_request_tokens


def concurrency_target(model: Model, profile: ReplicaProfile) -> int:
    """Knative's per-replica concurrency target for `model` (at least 1)."""
    return max(1, min(itl_bound(model, profile), kv_bound(model), profile.max_running_requests))
