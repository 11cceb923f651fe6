"""Prefill/decode pairs in the twin (radixfleet/twin/pd.py, region_pd.py): a request's time is
its prefill, its KV transfer and its decode; decode replicas see no prefill stalls; a pair
scales to zero and back as one; a pair is declared whole or refused where it is wrong."""

from __future__ import annotations

import math

import numpy as np
import pytest

from radixfleet.config.errors import ConfigError
from radixfleet.profile import ReplicaProfile
from radixfleet.replica.disagg import transfer_seconds
from radixfleet.replica.timing import prefill_pass_seconds
from radixfleet.twin.load import parse_scenario
from radixfleet.twin.log import Status
from radixfleet.twin.run import Outcome, run_scenario

PAIR = """
name: pd
seed: {seed}
duration_s: {duration}
regions: [{{name: r1, gpu_pools: [{{name: h100, gpus: 8, warm_gpus: 8}}]}}]
models:
  - name: m
    pool: h100
    min_replicas: {min_replicas}
    initial_replicas: {replicas}
    max_replicas: 4
    slo: {{ttft_ms: 1000, itl_ms: 9}}
    {serving}
tenants: [{{name: t, model: m}}]
workload: {{sources: [{{kind: poisson, tenant: t, rate_rps: {rate}, prompt_tokens_mean: {prompt},
  output_tokens_mean: {output}}}]}}
policies:
  - {{name: p, routing: smg_cache_aware_http, autoscale: {autoscale}, traffic: static}}
"""
PD_2_2 = "disaggregation: {prefill_replicas: 2, decode_replicas: 2}"


def run(serving: str, **fields: object) -> Outcome:
    values: dict[str, object] = {
        "seed": 5, "duration": 120, "min_replicas": 4, "replicas": 4, "rate": 1.0,
        "prompt": 2000, "output": 40, "autoscale": "fixed", "serving": serving,
    }  # fmt: skip
    values.update(fields)
    return run_scenario(parse_scenario(PAIR.format(**values), source="pd.yaml"), oracles=False)


def test_an_isolated_requests_time_is_prefill_then_transfer_then_decode() -> None:
    outcome = run(PD_2_2, rate=0.05, duration=600)
    log = outcome.records["p"].log
    arrival = outcome.workload.arrivals.t
    profile = ReplicaProfile()
    ok = [k for k in range(len(log.index)) if log.status[k] == Status.OK]
    spans = sorted((arrival[log.index[k]], log.ended[k]) for k in ok)
    checked = 0
    for k in ok:
        start, end = arrival[log.index[k]], log.ended[k]
        if any(s < end and start < e for s, e in spans if (s, e) != (start, end)):
            continue  # another request shared a replica's time: not isolated
        prompt, output = log.prompt[k], log.output[k]
        chunks = [(min(8192, prompt - done), done) for done in range(0, prompt, 8192)]
        prefill = sum(prefill_pass_seconds(profile, chunks=[c], slowdown=1.0) for c in chunks)
        assert log.ttft[k] == pytest.approx(prefill + transfer_seconds(profile, prompt))
        steps = [profile.decode_step_seconds(1, prompt + 1 + n) for n in range(output - 1)]
        if output > 1:
            assert log.itl[k] == pytest.approx(sum(steps) / (output - 1))
        checked += 1
    assert checked >= 15, f"only {checked} isolated requests"


def test_decode_replicas_keep_their_itl_where_colocated_prefills_stall_it() -> None:
    """Chat-sized prompts at a rate where a colocated replica spends a fifth of its time on
    prefill passes: its answers' mean ITL grows by that; a pair's decode replicas' does not."""
    busy = {"rate": 25.0, "prompt": 1200, "output": 200}
    colocated = run("", **busy).results["metrics"]["p"]
    pair = run(PD_2_2, **busy).results["metrics"]["p"]
    assert pair["failed"] == colocated["failed"] == 0
    assert pair["itl_p50_s"] < 0.85 * colocated["itl_p50_s"], (pair, colocated)
    assert pair["itl_attainment"] > colocated["itl_attainment"] + 0.2


def test_a_decode_replica_short_of_kv_room_holds_requests_until_room_frees() -> None:
    """Long prompts on one decode replica whose KV holds few of them: requests wait in its
    prealloc queue (TTFT grows, nothing fails), and its ITL stays that of a small batch."""
    one_decode = "disaggregation: {prefill_replicas: 3, decode_replicas: 1}"
    outcome = run(one_decode, rate=1.5, prompt=60_000, output=400, duration=180)
    metrics = outcome.results["metrics"]["p"]
    assert metrics["failed"] == 0
    log = outcome.records["p"].log
    ok = np.array(log.status) == Status.OK
    # 420k tokens hold at most seven 60k-token requests: their context bounds a step's time.
    worst_step = ReplicaProfile().decode_step_seconds(7, 420_000)
    assert float(np.nanmax(np.array(log.itl)[ok])) <= worst_step * 1.01
    assert metrics["ttft_p95_s"] > 5.0  # the queue for room, beyond prefill and transfer


def test_a_pair_sleeps_and_wakes_as_one() -> None:
    """Sparse requests under the KPA per role joined by the pair rule: the pair reaches zero,
    every request that finds it asleep wakes both roles and is answered (none lost), and no
    target ever has one role without the other."""
    outcome = run(
        "disaggregation: {prefill_replicas: 1, decode_replicas: 1}",
        min_replicas=0, rate=0.005, duration=1800, prompt=2000, output=50,
        autoscale="radixfleet.controllers.autoscale.twin:kpa_pairs",
    )  # fmt: skip
    metrics = outcome.results["metrics"]["p"]
    targets = [
        tuple(int(n) for n in d.detail.removeprefix("pair ").split("/"))
        for d in outcome.records["p"].decisions
        if d.kind == "scale"
    ]
    assert (0, 0) in targets
    assert all((p == 0) == (d == 0) for p, d in targets), targets
    asleep = targets.index((0, 0))
    assert any(p >= 1 and d >= 1 for p, d in targets[asleep:])
    assert metrics["cold_start_waits"] >= 2
    assert metrics["failed"] == 0
    assert metrics["requests"] >= 5


@pytest.mark.parametrize(
    ("pair", "where", "message"),
    [
        pytest.param(
            "{prefill_replicas: 0, decode_replicas: 2}",
            "",
            "prefill and decode replicas, or",
            id="decode-without-prefill",
        ),
        pytest.param(
            "{prefill_replicas: 3, decode_replicas: 3}",
            "",
            "above max_replicas",
            id="above-max-replicas",
        ),
        pytest.param("{transfer_backend: tcp}", ".transfer_backend", "mooncake", id="backend"),
    ],
)
def test_a_wrong_pair_is_refused_where_it_is(pair: str, where: str, message: str) -> None:
    values = {
        "seed": 1, "duration": 60, "min_replicas": 0, "replicas": 1, "rate": 1.0,
        "prompt": 100, "output": 10, "autoscale": "fixed", "serving": f"disaggregation: {pair}",
    }  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        parse_scenario(PAIR.format(**values), source="pd.yaml")
    text = str(caught.value)
    assert f"pd.yaml: models[0].disaggregation{where}:" in text
    assert message in text


def test_a_canary_of_a_pair_is_refused_where_it_is() -> None:
    """A pair's canary revision is not modelled: said, not run half-right."""
    values = {
        "seed": 1, "duration": 60, "min_replicas": 0, "replicas": 1, "rate": 1.0,
        "prompt": 100, "output": 10, "autoscale": "fixed", "serving": PD_2_2,
    }  # fmt: skip
    text = PAIR.format(**values) + "faults: [{kind: canary, at_s: 10, model: m}]\n"
    with pytest.raises(ConfigError, match=r"pd.yaml: faults\[0\].model: 'm' is a P/D pair"):
        parse_scenario(text, source="pd.yaml")


def test_a_colocated_model_is_untouched_by_the_pair_machinery() -> None:
    """Same scenario, no pair: no request takes a transfer, every replica does both."""
    outcome = run("", rate=2.0)
    log = outcome.records["p"].log
    assert all(not math.isnan(t) for t, s in zip(log.ttft, log.status, strict=True) if s == 0)
    assert not [d for d in outcome.records["p"].decisions if d.kind == "scale"]
