"""The kit's coalescing reconcile loop outlives every failed pass.

Found by the chaos test that kills the test cluster's API server: the kubernetes client raised
its own connection error (not an API error), the loop's task ended, and the quota controller
never reconciled again. Each failure kind here is followed by a pass that works.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
import urllib3

from radixfleet.kit.errors import KubeError
from radixfleet.kit.loop import Loop
from radixfleet.kit.metrics import ControllerMetrics


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(KubeError("list tenants: HTTP 503", status=503), id="api-error"),
        pytest.param(
            urllib3.exceptions.MaxRetryError(None, "/api", ConnectionRefusedError()),  # type: ignore[arg-type]
            id="api-server-down",
        ),
        pytest.param(ConnectionResetError("reset"), id="connection-reset"),
        pytest.param(ValueError("a bug"), id="a-bug"),
    ],
)
def test_a_failed_pass_is_retried_and_the_loop_goes_on(failure: Exception) -> None:
    passes: list[datetime] = []

    def reconcile(now: datetime) -> list[str]:
        passes.append(now)
        if len(passes) == 1:
            raise failure
        return []

    loop = Loop("test", reconcile, resync_seconds=60.0, debounce_seconds=0.0,
                retry_seconds=0.01, metrics=ControllerMetrics())  # fmt: skip

    async def run() -> None:
        task = asyncio.create_task(loop.run())
        loop.wake.set()
        while len(passes) < 2:
            assert not task.done(), "the loop ended"
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(run(), timeout=30))
    assert len(passes) >= 2
