"""The autoscaler on the local fleet: a burst wakes a model from zero, the autoscaler scales it
up on SGLang's gauges, and back to zero after the idle window, with no request lost.

Emulated replicas behind the real smg gateway, a region entry that holds requests while the
model is at zero (the activator's part), and `LocalFleetAutoscaler` ticking every second on the
fleet's loop. The replicas' KV cache is small so that one replica saturates under the burst.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from radixfleet.controllers.autoscale.localfleet import LocalFleetAutoscaler, parse_metrics
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import Verb
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.procs import processes_with_marker
from radixfleet.workload.records import WorkItem
from radixfleet.workload.replay import Replayer

REGION, MODEL = "r1", "m"
IDLE_S = 10
BURST = 60  # requests over three seconds
SETTLE_TIMEOUT_S = 60.0


def fleet_spec() -> LocalFleetSpec:
    model = ModelSpec(
        name=MODEL, replicas=0, max_replicas=4,
        profile_overrides={"kv_capacity_tokens": 3000.0},
    )  # fmt: skip
    return LocalFleetSpec(regions=[RegionSpec(name=REGION, models=[model])], cold_start_s=1.0)


def policy() -> AutoscalePolicySpec:
    return AutoscalePolicySpec.model_validate(
        {
            "inferenceService": MODEL,
            "maxReplicas": 4,
            "intervalSeconds": 1,
            "idleSeconds": IDLE_S,
            "scaleUp": {"stabilizationSeconds": 0},
            "scaleDown": {"stabilizationSeconds": 3, "periodSeconds": 0},
            "coldStart": {"seconds": 1, "budget": 1.0},  # this test wants to see zero again
        }
    )


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "tokenizer-cache"


@pytest.fixture(scope="module")
def fleet(cache_dir: Path) -> Iterator[LocalFleet]:
    local = LocalFleet(fleet_spec(), cache_dir=cache_dir)
    with local:
        yield local
    assert processes_with_marker(local.fleet_id) == [], "processes outlived the fleet"


@pytest.mark.fleet
def test_burst_from_zero_scales_up_and_back_to_zero_with_no_request_lost(
    fleet: LocalFleet,
) -> None:
    scaler = fleet.scaler(REGION, MODEL)
    autoscaler = LocalFleetAutoscaler(scaler=scaler, entry=fleet.entry(REGION), spec=policy())
    task = fleet.run(_start(autoscaler))
    try:
        items = [
            WorkItem(at=0.05 * i, region=REGION, model=MODEL,
                     prompt=f"Request {i}: " + "tell me about autoscaling " * 6, max_tokens=48)
            for i in range(BURST)
        ]  # fmt: skip
        results = asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))
        done_at = time.time()
        assert [r.error for r in results if not r.ok] == []
        assert _wait(lambda: scaler.desired() == 0 and scaler.ready_count() == 0)
        zero_at = time.time()
    finally:
        fleet.run(_stop(task))
    desired = [d.desired for d in autoscaler.decisions]
    assert max(desired) >= 2, desired  # more than the entry's wake-up replica
    assert zero_at - done_at >= IDLE_S - 1  # not before the idle window
    assert Verb.HALT not in {d.verb for d in autoscaler.decisions}
    # The first look has no counters before it: no arrival rate is remembered from it (a 0
    # there read as a rise), and the ticks after it remember theirs.
    assert autoscaler.decisions[0].status.rates == ()
    assert any(d.status.rates for d in autoscaler.decisions[1:])


def _wait(condition: object, timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.5)
    return False


async def _start(autoscaler: LocalFleetAutoscaler) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(autoscaler.run())


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


EXPOSITION = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",tp_rank="1"} 4.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",tp_rank="0"} 0.25
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",tp_rank="0"} 12.0
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m",cache_source="device"} 100.0
sglang:cached_tokens_total{model_name="m",cache_source="host"} 20.0
"""


def test_parse_metrics_reads_gauges_per_replica_and_sums_counters() -> None:
    scrape = parse_metrics(EXPOSITION)
    assert scrape.gauges["running"] == 4.0  # a tensor-parallel replica: the largest rank's
    assert scrape.gauges["queued"] == 1.0
    assert scrape.gauges["kv_usage"] == 0.25
    assert scrape.gauges["gen_throughput"] is None
    assert scrape.counters == {"cached": 120.0, "requests": 12.0}
