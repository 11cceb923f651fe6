"""The autoscaler in the fleet twin: the same decision on the replica model in virtual time.

A short run (three virtual minutes of Azure-shaped requests on one region, over-provisioned at
the start) checks the wiring: the twin imports the policy by name, feeds it replica stats and
follows its counts and victims; the benchmark (benchmarks/autoscale_twin.py) compares.
"""

from __future__ import annotations

from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.twin import TwinAutoscaler, spec_for
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import CounterValues, ReplicaModel, ReplicaStats, RequestSpec
from radixfleet.twin.epochs import run_policy
from radixfleet.twin.interfaces import ReplicaView, ServiceObservation
from radixfleet.twin.registry import PolicyContext
from radixfleet.twin.results import policy_metrics
from radixfleet.twin.scenario import Model, Scenario
from radixfleet.twin.service import kv_tiers
from radixfleet.twin.workload import Workload


def scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "name": "autoscale-wiring", "seed": 3, "duration_s": 180.0,
            "regions": [{"name": "r1", "gpu_pools": [{"name": "h100", "gpus": 16}]}],
            "models": [{"name": "m", "pool": "h100", "min_replicas": 0, "max_replicas": 8,
                        "initial_replicas": 6}],
            "tenants": [{"name": "t", "model": "m"}],
            "workload": {"sources": [{"kind": "poisson", "tenant": "t", "rate_rps": 30.0}]},
            "policies": [{"name": "ours", "autoscale": "tests.autoscale.test_twin:quick",
                          "traffic": "static"}],
        }
    )  # fmt: skip


def quick(ctx: PolicyContext) -> TwinAutoscaler:
    """The default policy with a 30 s scale-down window, to see it act in three minutes."""
    return TwinAutoscaler(spec_for(ctx, scaleDown={"stabilizationSeconds": 30}))


def test_the_twin_runs_the_autoscaler_by_name() -> None:
    spec = scenario()
    workload = Workload(spec)
    record = run_policy(spec, spec.policies[0], workload)
    metrics = policy_metrics(record, workload)
    assert metrics["failed"] == 0
    actives = [s.active for s in record.samples]
    assert actives[0] == 6
    assert 2 <= actives[-1] <= 4, actives  # about 15 req/s per replica within the ITL SLO
    assert metrics["slo_attainment"] > 0.95


def _view(replica_id: int, cached_total: int, state: str = "ready") -> ReplicaView:
    counters = CounterValues(
        num_requests_total=0, num_aborted_requests_total=0, prompt_tokens_total=0,
        cached_tokens_total=cached_total, generation_tokens_total=0, evicted_tokens_total=0,
    )  # fmt: skip
    stats = ReplicaStats(
        num_running_reqs=2, num_queue_reqs=0, kv_used_tokens=1000, kv_evictable_tokens=0,
        kv_available_tokens=400_000, max_total_num_tokens=420_000, cache_hit_rate=0.1,
        gen_throughput=100.0, decode_sum_seq_lens=0, counters=counters,
    )  # fmt: skip
    return ReplicaView(id=replica_id, state=state, created_at=0.0, in_flight=2, stats=stats)


def _observation(views: list[ReplicaView], arrivals: int = 0) -> ServiceObservation:
    return ServiceObservation(
        region="r1", model="m", replicas=views, concurrency=0, mean_concurrency=0.0,
        buffered=0, arrivals=arrivals, finished=0, min_replicas=0, max_replicas=8,
    )  # fmt: skip


def test_a_first_look_has_no_arrival_rate_and_a_later_one_counts_its_interval() -> None:
    # The first tick has no interval behind it. Its arrivals used to read as a rate of 0, and
    # the line from that 0 to the real rate forecast a rise for the whole lookback: at
    # 300 req/s it bought three replicas 300 s in for a trace that was flat.
    policy = TwinAutoscaler(AutoscalePolicySpec(inference_service="m"))
    assert policy.observe(_observation([_view(1, 0)]), 0.0).arrival_rate is None
    assert policy.observe(_observation([_view(1, 0)], arrivals=25), 10.0).arrival_rate == 2.5


def test_victims_are_starting_replicas_then_the_coldest_caches() -> None:
    policy = TwinAutoscaler(AutoscalePolicySpec(inference_service="m"))
    policy.desired_replicas(_observation([_view(1, 0), _view(2, 0), _view(3, 0)]), 0.0)
    later = [_view(1, 90_000), _view(2, 1_000), _view(3, 50_000), _view(4, 0, "starting")]
    policy.desired_replicas(_observation(later), 10.0)
    assert policy.choose_victims(_observation(later), 2) == [4, 2]


def _serve(replica: ReplicaModel, groups: list[int], *, now: float) -> float:
    """Send one 1,536-token prompt per group, each after the one before has finished."""
    for index, group in enumerate(groups):
        blocks = tuple((group, i) for i in range(24))
        spec = RequestSpec(rid=f"{now}-{index}", prompt_tokens=1536, output_tokens=2,
                           max_new_tokens=2, prompt_blocks=blocks)  # fmt: skip
        request = replica.submit(spec, now=now)
        while not request.done:
            now = replica.next_event_time() or now
            replica.advance(now)
    return now


def test_a_replica_whose_host_tier_serves_hits_is_kept_over_one_with_equal_gpu_hits() -> None:
    # Two replicas as the twin builds them for a model with a host tier, on a GPU holding one
    # prompt: both hit prompt 0 on the GPU once; then one is asked for it again after prompt 1
    # pushed it to the host tier, the other for a new prompt.
    model = Model(name="m", pool="h100", kv_tiers={"host_gib": 1})  # type: ignore[arg-type]
    profile = ReplicaProfile(kv_capacity_tokens=2048)
    host, storage = kv_tiers(model, profile)
    replicas = {
        n: ReplicaModel(profile=profile, now=0.0, warm=True, block_tokens=64, host_tier=host,
                        storage=storage)
        for n in (1, 2)
    }  # fmt: skip
    policy = TwinAutoscaler(AutoscalePolicySpec(inference_service="m"))
    views = [_live_view(n, r, 0.0) for n, r in replicas.items()]
    policy.desired_replicas(_observation(views), 0.0)
    ends = [_serve(replicas[1], [0, 0, 1, 0], now=0.0), _serve(replicas[2], [0, 0, 1, 2], now=0.0)]
    now = max(ends) + 1.0
    counters = {n: r.stats(now).counters for n, r in replicas.items()}
    assert counters[1].device_cached_tokens_total == counters[2].device_cached_tokens_total > 0
    assert counters[1].host_cached_tokens_total > 0 == counters[2].host_cached_tokens_total
    later = [_live_view(n, r, now) for n, r in replicas.items()]
    policy.desired_replicas(_observation(later), now)
    assert policy.choose_victims(_observation(later), 1) == [2]


def _live_view(replica_id: int, replica: ReplicaModel, now: float) -> ReplicaView:
    return ReplicaView(id=replica_id, state="ready", created_at=0.0, in_flight=0,
                       stats=replica.stats(now))  # fmt: skip
