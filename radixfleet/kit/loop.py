"""One coalescing reconcile loop for controllers that reconcile the fleet as a whole.

Some controllers (the quota, the routers) decide over every object at once, not one custom
resource at a time, so a kopf timer per object does not fit them. Their kopf event handlers
only wake this loop (they keep no state on the objects they see); it runs one reconcile at a
time, at least every `resync_seconds` (which bounds how stale the cluster can be if an event is
lost), folds a burst of events (`kubectl apply -k`) into one pass, and retries a pass that
failed after `retry_seconds`. Every pass is idempotent. A pass that got no answer at all (the
API server restarting: the client raises its connection errors, not an API error) is retried
like any other; before, it ended the loop for good and the controller went quiet (found by the
chaos test that kills the test cluster's API server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from radixfleet.kit.errors import KubeError
from radixfleet.kit.kopfglue import verbs_of
from radixfleet.kit.kube import Resource
from radixfleet.kit.metrics import METRICS, ControllerMetrics

log = logging.getLogger(__name__)


@dataclass
class Loop:
    """`reconcile(now)` once at a time, woken by events, at least every `resync_seconds`."""

    name: str
    reconcile: Callable[[datetime], object]
    resync_seconds: float = 30.0
    debounce_seconds: float = 1.0
    retry_seconds: float = 5.0
    metrics: ControllerMetrics = field(default_factory=lambda: METRICS)  # the process's one
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self.resync_seconds)
            await asyncio.sleep(self.debounce_seconds)
            self.wake.clear()
            await self.once()

    async def once(self) -> None:
        self.metrics.tick(self.name)
        try:
            # The kubernetes client blocks: keep kopf's event loop free while it works.
            result = await asyncio.to_thread(self.reconcile, datetime.now(UTC))
        except KubeError as error:
            self.metrics.error(self.name, temporary=error.temporary)
            log.warning("%s reconcile failed (%s); retrying", self.name, error)
        except Exception:  # no answer (connection errors), or a bug: the loop must outlive it
            self.metrics.error(self.name, temporary=True)
            log.exception("%s reconcile failed; retrying", self.name)
        else:
            self.metrics.decided(self.name, verbs_of(result))
            return
        await asyncio.sleep(self.retry_seconds)
        self.wake.set()


def register_loop(
    registry: kopf.OperatorRegistry,
    loop: Loop,
    *,
    watch: Sequence[Resource],
    watch_labels: dict[str, Any] | None = None,
) -> None:
    """Run `loop` while the operator runs, woken by any event on the `watch` resources."""
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start(**_: Any) -> None:
        tasks.append(asyncio.create_task(loop.run()))
        loop.wake.set()

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        for task in tasks:
            task.cancel()

    def wake(**_: Any) -> None:
        loop.wake.set()

    for resource in watch:
        kopf.on.event(
            resource.group, resource.version, resource.plural, registry=registry,
            id=f"{loop.name}-wake-{resource.plural}",
            labels=(watch_labels or {}).get(resource.plural),
        )(wake)  # fmt: skip
