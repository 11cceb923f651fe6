"""The kopf glue every controller uses: a timer per custom resource, and one error rule.

`run_tick` runs one reconcile and says what kopf should do with its failure, the same way for
every controller: an invalid spec is permanent; an error that knows it is temporary (a 409, a
429, a 5xx, no answer, Route 53 throttling) becomes `kopf.TemporaryError` with the delay the one
`RetryPolicy` gives for that attempt (Retry-After honoured); any other adapter error is
permanent. Ticks, errors and decisions are counted per controller (`radixfleet.kit.metrics`).
`configure` is the operator's settings, once for all controllers: kopf's bookkeeping in
annotations under one prefix, and peering (leader election, see `radixfleet.kit.leader`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from radixfleet.adapters.retry import Retryable, RetryPolicy
from radixfleet.kit.kube import Resource, keep_kopf_state_in_annotations
from radixfleet.kit.metrics import METRICS, ControllerMetrics

# One policy for every Kubernetes (and Route 53) failure a tick meets: kopf's retries of a
# tick wait these long; past the last, the last one again (a timer never gives up).
KUBE_RETRY = RetryPolicy(backoff_seconds=(1.0, 2.0, 5.0, 10.0, 30.0), max_retry_after_seconds=60.0)
#: kopf's bookkeeping (progress, diff-base) of every controller, in annotations under this.
KOPF_PREFIX = "operator.radixfleet.io"

Reconcile = Callable[[], object]


def retry_delay(error: BaseException, *, attempt: int, policy: RetryPolicy = KUBE_RETRY) -> float:
    """Seconds before kopf retries a tick that failed with a temporary `error`."""
    delay = policy.delay(error, attempt)
    if delay is None:
        return policy.backoff_seconds[-1] if policy.backoff_seconds else 0.0
    return delay


def run_tick(
    controller: str,
    reconcile: Reconcile,
    *,
    kind: str,
    retry: int = 0,
    policy: RetryPolicy = KUBE_RETRY,
    metrics: ControllerMetrics = METRICS,
) -> object:
    """`reconcile()`, with its errors in kopf's retry vocabulary; `retry` is kopf's count."""
    metrics.tick(controller)
    try:
        result = reconcile()
    except ValidationError as error:
        metrics.error(controller, temporary=False)
        raise kopf.PermanentError(f"invalid {kind} spec: {error}") from error
    except Exception as error:
        if not isinstance(error, Retryable):
            raise
        metrics.error(controller, temporary=error.temporary)
        if error.temporary:
            delay = retry_delay(error, attempt=retry + 1, policy=policy)
            raise kopf.TemporaryError(str(error), delay=delay) from error
        raise kopf.PermanentError(str(error)) from error
    metrics.decided(controller, verbs_of(result))
    return result


def verbs_of(result: object) -> list[str]:
    """The verbs of what a reconcile returned: None (nothing due), a decision, or a list."""
    if result is None:
        return []
    items = result if isinstance(result, list) else [result]
    return [str(getattr(item, "verb", None) or "decide") for item in items]


def timer(
    registry: kopf.OperatorRegistry,
    *,
    resource: Resource,
    id: str,
    interval: float,
    tick: Callable[[Mapping[str, Any], datetime, int], None],
) -> None:
    """A kopf timer on every object of `resource` calling `tick(body, now, retry)`."""

    def handler(body: kopf.Body, **kwargs: Any) -> None:
        tick(body, datetime.now(UTC), int(kwargs.get("retry", 0)))

    kopf.timer(
        resource.group, resource.version, resource.plural, id=id, interval=interval,
        registry=registry,
    )(handler)  # fmt: skip


def configure(
    settings: kopf.OperatorSettings,
    *,
    peering: str | None,
    priority: int,
    prefix: str = KOPF_PREFIX,
) -> None:
    """The operator's settings: bookkeeping in annotations, and peering unless standalone."""
    keep_kopf_state_in_annotations(settings, prefix=prefix)
    if peering is not None:
        settings.peering.name = peering
        settings.peering.priority = priority
        settings.peering.mandatory = True
        settings.peering.clusterwide = True
