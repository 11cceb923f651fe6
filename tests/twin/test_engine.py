"""Whole-fleet behaviour in the twin: canaries judged or not, scale from zero, failover."""

from __future__ import annotations

from typing import Any

import pytest

from radixfleet.twin.load import parse_scenario
from radixfleet.twin.run import run_scenario

CANARY = """
name: canary
seed: 2
duration_s: 420
regions: [{{name: r1, gpu_pools: [{{name: h100, gpus: 8, warm_gpus: 8}}]}}]
models:
  - {{name: m, pool: h100, min_replicas: 2, initial_replicas: 2, max_replicas: 4}}
tenants: [{{name: t, model: m}}]
workload: {{sources: [{{kind: poisson, tenant: t, rate_rps: 25, prompt_tokens_mean: 600,
  output_tokens_mean: 60}}]}}
faults: [{{kind: canary, at_s: 10, model: m, regression: {regression}}}]
policies:
  - {{name: judged, routing: least_load, autoscale: fixed, traffic: static, canary: radixfleet}}
  - {{name: blind, routing: least_load, autoscale: fixed, traffic: static, canary: no_analysis,
     baseline: true}}
"""


def _canary(regression: str) -> dict[str, Any]:
    scenario = parse_scenario(CANARY.format(regression=regression), source="canary.yaml")
    metrics = run_scenario(scenario, oracles=False).results["metrics"]
    return {name: values["canary"][0] for name, values in metrics.items()}


@pytest.mark.slow
def test_a_bad_canary_is_rolled_back_only_when_judged() -> None:
    canary = _canary("{slowdown: 2.0, error_rate: 0.1}")
    assert canary["judged"]["outcome"] == "rolled_back"
    assert canary["judged"]["detection_s"] is not None
    assert canary["blind"]["outcome"] == "promoted"
    assert canary["judged"]["exposure"] < canary["blind"]["exposure"] / 5


def test_a_workers_500_reaches_the_client_as_smg_passes_it_on() -> None:
    """smg 1.13 retries a refusal on another pick but not a worker's 500 (measured,
    radixfleet/controllers/routers/README.md): a canary answering one request in ten with a 500
    costs its clients about that many, where a retrying router would have hidden nearly all of
    them."""
    scenario = parse_scenario(CANARY.format(regression="{error_rate: 0.1}"), source="canary.yaml")
    blind = run_scenario(scenario, oracles=False).results["metrics"]["blind"]
    canary = blind["canary"][0]
    assert canary["exposure"] > 1000
    assert 0.05 < canary["exposure_failed"] / canary["exposure"] < 0.15, canary
    assert blind["failed_by_reason"].get("server_error", 0) == canary["exposure_failed"]


@pytest.mark.slow
def test_a_good_canary_is_promoted_either_way() -> None:
    canary = _canary("{}")
    assert canary["judged"]["outcome"] == "promoted"
    assert canary["blind"]["outcome"] == "promoted"


BASELINE = """
name: canary-baseline
seed: {seed}
duration_s: 420
regions: [{{name: r1, gpu_pools: [{{name: h100, gpus: 16, warm_gpus: 16}}]}}]
models:
  - {{name: m, pool: h100, min_replicas: 2, initial_replicas: 4, max_replicas: 8}}
tenants: [{{name: t, model: m}}]
workload: {{sources: [{{kind: poisson, tenant: t, rate_rps: 30, prompt_tokens_mean: 600,
  output_tokens_mean: 120}}]}}
faults: [{{kind: canary, at_s: 10, model: m, regression: {regression}}}]
policies:
  - {{name: stable, routing: least_load, autoscale: kpa, traffic: static, canary: radixfleet}}
  - {{name: baseline, routing: least_load, autoscale: kpa, traffic: static,
     canary: radixfleet_baseline}}
"""


def _rollouts(regression: str, seed: int) -> dict[str, tuple[str, float | None, list[int]]]:
    """Per arm: the canary's outcome, the seconds from its first traffic to the end of the
    rollout, and the requests each revision served (stable, canary, baseline)."""
    text = BASELINE.format(regression=regression, seed=seed)
    outcome = run_scenario(parse_scenario(text, source="baseline.yaml"), oracles=False)
    rollouts = {}
    for name, record in outcome.records.items():
        decisions = [d for d in record.decisions if d.kind == "canary"]
        first = next(d.at for d in decisions if d.detail.startswith("weight"))
        end = next((d.at for d in decisions if d.detail.startswith(("rollback", "promote"))), None)
        served = [list(record.log.revision).count(index) for index in range(3)]
        result = outcome.results["metrics"][name]["canary"][0]["outcome"]
        rollouts[name] = (result, None if end is None else end - first, served)
    return rollouts


def test_a_twice_slower_canary_is_rolled_back_in_two_intervals_beside_a_baseline() -> None:
    """Judged against the busy stable revision, a twice-slower canary's replica (batches of one
    or two at 5%) looks little slower, and on this seed passes its 5% step; judged against a
    baseline of the canary's share it fails both analyses at 5%, the fewest a rollback needs
    (threshold 2, 60 s apart). The baseline serves about what the canary serves."""
    rollouts = _rollouts("{slowdown: 2.0}", seed=2)
    outcome, seconds, served = rollouts["baseline"]
    assert outcome == "rolled_back" and seconds == 120.0, rollouts
    stable_outcome, stable_seconds, stable_served = rollouts["stable"]
    assert stable_outcome == "rolled_back" and stable_seconds and stable_seconds > 120.0, rollouts
    assert stable_served[2] == 0
    assert 0.7 < served[2] / served[1] < 1.4, served


def test_a_good_canary_beside_a_baseline_is_promoted_through_every_step() -> None:
    rollouts = _rollouts("{}", seed=2)
    assert rollouts["baseline"][0] == "promoted", rollouts
    assert rollouts["baseline"][1] == 180.0  # three steps of 60 s: 5, 20 and 50%


NO_GPU_FOR_A_BASELINE = """
name: canary-baseline-no-gpu
seed: 2
duration_s: 420
regions: [{name: r1, gpu_pools: [{name: h100, gpus: 5, warm_gpus: 5}]}]
models: [{name: m, pool: h100, min_replicas: 4, initial_replicas: 4, max_replicas: 4}]
tenants: [{name: t, model: m}]
workload: {sources: [{kind: poisson, tenant: t, rate_rps: 20, prompt_tokens_mean: 600,
  output_tokens_mean: 120}]}
faults: [{kind: canary, at_s: 10, model: m, regression: {}}]
policies:
  - {name: baseline, routing: least_load, autoscale: fixed, traffic: static,
     canary: radixfleet_baseline}
"""


def test_a_baseline_that_never_serves_halts_the_rollout_and_blames_no_canary() -> None:
    """Five GPUs: four stable replicas and the canary's. The baseline never gets one; its share
    stays with the stable revision, and the judge halts on its missing requests: the canary is
    neither rolled back for it nor promoted without a comparison."""
    scenario = parse_scenario(NO_GPU_FOR_A_BASELINE, source="no-gpu.yaml")
    outcome = run_scenario(scenario, oracles=False)
    record = outcome.records["baseline"]
    assert outcome.results["metrics"]["baseline"]["canary"][0]["outcome"] == "open"
    assert 2 not in set(record.log.revision)  # nothing sent to a baseline with no replica
    weights = [d.detail for d in record.decisions if d.kind == "canary"]
    assert weights[-1].startswith("weight 5%"), weights


ZERO = """
name: zero
duration_s: 200
regions: [{name: r1, gpu_pools: [{name: h100, gpus: 4, warm_gpus: 4}]}]
models: [{name: m, pool: h100, min_replicas: 0, initial_replicas: 0, max_replicas: 2}]
tenants: [{name: t, model: m}]
workload: {sources: [{kind: poisson, tenant: t, rate_rps: 0.05}]}
policies: [{name: kpa, autoscale: kpa, traffic: static}]
"""


def test_a_model_at_zero_wakes_on_its_first_request_and_loses_none() -> None:
    outcome = run_scenario(parse_scenario(ZERO, source="zero.yaml"), oracles=False)
    metrics = outcome.results["metrics"]["kpa"]
    assert metrics["requests"] > 0
    assert metrics["failed"] == 0
    assert metrics["cold_start_waits"] >= 1
    assert metrics["ttft_p95_s"] > 30  # someone waited for the 60 s cold start
    assert metrics["gpu_hours"] > 0


SHARED_PREFIXES = """
name: prefixes
seed: 5
duration_s: 180
regions: [{name: r1, gpu_pools: [{name: h100, gpus: 8, warm_gpus: 8}]}]
models:
  - {name: m, pool: h100, min_replicas: 4, initial_replicas: 4, max_replicas: 4,
     slo: {ttft_ms: 1000, itl_ms: 50}}
tenants: [{name: t, model: m}]
workload:
  sources:
    - {kind: shared_prefix, tenant: t, rate_rps: 24, groups: 256, system_prompt_tokens: 4096,
       question_tokens: 128, output_tokens: 64}
policies:
  - {name: cache-aware, routing: smg_cache_aware_http, autoscale: fixed, traffic: static}
"""


def test_the_gpu_oracle_is_a_bound_a_fleet_meeting_the_slo_cannot_beat() -> None:
    # 256 prompts of 4k tokens: more than two replicas cache, fewer than four do. Timed on a
    # cold cache, one replica would look slower than a cache-aware fleet's replicas are.
    outcome = run_scenario(parse_scenario(SHARED_PREFIXES, source="prefixes.yaml"))
    metrics = outcome.results["metrics"]["cache-aware"]
    assert metrics["slo_attainment"] >= 0.99
    assert outcome.results["oracles"]["gpu_hours"] <= metrics["gpu_hours"]


CRASH = """
name: crash
seed: 4
duration_s: 120
regions: [{{name: r1, gpu_pools: [{{name: h100, gpus: 8, warm_gpus: 8}}]}}]
models:
  - {{name: m, pool: h100, min_replicas: 3, initial_replicas: 3, max_replicas: 3}}
tenants: [{{name: t, model: m}}]
router: {{circuit_breaker: {breaker}}}
workload:
  sources:
    - {{kind: shared_prefix, tenant: t, rate_rps: 12, groups: 6, system_prompt_tokens: 2048,
       question_tokens: 64, output_tokens: 32}}
faults: [{{kind: replica_crash, at_s: 40, region: r1, model: m, restart_after_s: 600}}]
policies:
  - {{name: cache-aware, routing: smg_cache_aware_http, autoscale: fixed, traffic: static}}
"""


def _crash_failures(*, breaker: bool) -> dict[str, int]:
    text = CRASH.format(breaker=str(breaker).lower())
    outcome = run_scenario(parse_scenario(text, source="crash.yaml"), oracles=False)
    failed: dict[str, int] = outcome.results["metrics"]["cache-aware"]["failed_by_reason"]
    return failed


def test_the_gateways_circuit_breaker_shuts_out_a_crashed_replica() -> None:
    """Cache-aware routing keeps sending a dead replica its prompts until readiness drops
    it (30 s); smg's breaker shuts it out after ten failed attempts. With six attempts a
    request (five retries), at most two requests can fail on the way (beyond those the crash
    cut off)."""
    with_breaker = _crash_failures(breaker=True)
    without = _crash_failures(breaker=False)
    assert with_breaker.get("server_error", 0) <= 2, with_breaker
    assert without.get("server_error", 0) > 10, without
    assert with_breaker.get("aborted") == without.get("aborted"), "the crash itself is the same"
