"""Where a burst's seconds go (radixfleet/twin/scaleup.py): each phase of the scale-up behind a
burst is the twin's own lifecycle, so the phases it reports are the ones the replicas went
through, on warm GPUs and on new nodes."""

from __future__ import annotations

import pytest

from radixfleet.profile import resolve_profile
from radixfleet.twin.load import parse_scenario
from radixfleet.twin.run import run_scenario
from radixfleet.twin.scaleup import ScaleUp, scale_up

BURST_AT, BURST_S = 120.0, 180.0
SCENARIO = """
name: one-burst
seed: 7
duration_s: 420
regions: [{name: r1, gpu_pools: [{name: h100, gpus: 8, warm_gpus: WARM, node_provision_s: 100}]}]
models:
  - {name: m, pool: h100, min_replicas: 1, initial_replicas: 1, max_replicas: 8,
     slo: {ttft_ms: 1000, itl_ms: 50}}
tenants: [{name: t, model: m}]
workload:
  sources:
    - {kind: shared_prefix, tenant: t, rate_rps: 1, groups: 16, system_prompt_tokens: 1024,
       question_tokens: 512, output_tokens: 256}
faults: [{kind: tenant_burst, at_s: 120, tenant: t, duration_s: 180, factor: 40}]
policies:
  - {name: ours, autoscale: "radixfleet.controllers.autoscale.twin:no_prewarm", traffic: static}
"""


def _scale_up(warm_gpus: int, *, model_cache: bool = True, later_s: float = 0.0) -> ScaleUp:
    """The scale-up behind the burst, which comes `later_s` after `BURST_AT` (a run that starts
    its replica by downloading the weights needs the time)."""
    text = SCENARIO.replace("WARM", str(warm_gpus))
    if not model_cache:
        text = text.replace("node_provision_s: 100}", "node_provision_s: 100, model_cache: false}")
    text = text.replace("duration_s: 420", f"duration_s: {420 + later_s:g}")
    text = text.replace(f"at_s: {BURST_AT:g}", f"at_s: {BURST_AT + later_s:g}")
    scenario = parse_scenario(text, source="burst.yaml")
    outcome = run_scenario(scenario, oracles=False)
    at = BURST_AT + later_s
    found = scale_up(outcome.records["ours"], outcome.workload, start_s=at, length_s=BURST_S)
    assert found is not None, "the autoscaler added no replica for a tenfold burst"
    return found


def test_on_warm_gpus_the_seconds_go_to_deciding_and_the_cold_start() -> None:
    found = _scale_up(warm_gpus=8)
    cold_start = resolve_profile("h100-llama-3.1-8b").cold_start_seconds
    assert found.node_s == 0.0
    assert found.cold_start_s == pytest.approx(cold_start)
    assert found.warm_up_s == 0.0  # pre-warming off
    assert 0.0 < found.decided_s <= 30.0  # within three ticks of ten seconds
    assert found.first_routable_s == pytest.approx(found.decided_s + cold_start)
    assert found.before_first > 0.0 and found.requests > 0


def test_on_new_nodes_the_node_and_the_weights_come_first() -> None:
    warm, new_nodes = _scale_up(warm_gpus=8), _scale_up(warm_gpus=1)
    profile = resolve_profile("h100-llama-3.1-8b")
    download = profile.cold_start_from_s3_seconds() - profile.cold_start_seconds
    assert new_nodes.node_s == pytest.approx(100.0 + download)
    assert new_nodes.first_routable_s > warm.first_routable_s + 100.0
    assert new_nodes.before_first > warm.before_first


def test_without_the_nodes_model_cache_every_replica_downloads_its_weights_first() -> None:
    cached = _scale_up(warm_gpus=8, later_s=300.0)
    uncached = _scale_up(warm_gpus=8, model_cache=False, later_s=300.0)
    profile = resolve_profile("h100-llama-3.1-8b")
    download = profile.cold_start_from_s3_seconds() - profile.cold_start_seconds
    assert cached.node_s == 0.0 and uncached.node_s == pytest.approx(download)
    assert uncached.first_routable_s == pytest.approx(cached.first_routable_s + download, abs=10.0)
    assert uncached.before_first > cached.before_first


def test_the_burst_is_served_better_once_a_new_replica_takes_traffic() -> None:
    found = _scale_up(warm_gpus=8)
    assert found.attainment_before is not None and found.attainment_after is not None
    assert found.attainment_after > found.attainment_before
