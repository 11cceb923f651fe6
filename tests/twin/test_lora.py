"""Multi-LoRA in the twin: the scenario's `lora`, the adapters requests name, and the three
routing policies on real replica models (radixfleet/replica/lora.py) and the twin's replicas."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.config.errors import ConfigError
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaModel, RequestSpec
from radixfleet.twin.load import parse_scenario
from radixfleet.twin.lora import NO_ADAPTER, adapter_name, replica_lora
from radixfleet.twin.lora_routing import AdapterRouting, Partitioned, partition
from radixfleet.twin.oracles import replica_capacity
from radixfleet.twin.registry import PolicyContext, build
from radixfleet.twin.run import run_scenario
from radixfleet.twin.scenario import Lora, Model, Scenario
from radixfleet.twin.service import Replica
from radixfleet.twin.workload import Workload
from tests.twin.conftest import SMALL

PROFILE = ReplicaProfile()  # h100-llama-3.1-8b
LORA = {"adapters": 40, "zipf_alpha": 1.0, "max_loaded_loras": 4, "max_loras_per_batch": 2}


def _scenario(lora: dict[str, Any] | None = LORA, **changes: Any) -> Scenario:
    data = yaml.safe_load(SMALL)
    data["faults"] = []
    data["models"][0] |= {"lora": lora, "initial_replicas": 4, "min_replicas": 4}
    data |= changes
    return parse_scenario(yaml.safe_dump(data), source="lora.yaml")


def _replicas(model: Model, count: int) -> list[Replica]:
    """The twin's replicas, each with a real replica model built with the model's LoRA flags."""
    service, revision = SimpleNamespace(model=model), SimpleNamespace()  # not asked for here
    replicas = []
    for n in range(count):
        replica = Replica(replica_id=n + 1, service=service, revision=revision, created_at=0.0)  # type: ignore[arg-type]
        replica.model = ReplicaModel(
            profile=PROFILE, now=-1000.0, warm=True, lora=replica_lora(model)
        )
        replicas.append(replica)
    return replicas


def _request(n: int, adapter: str | None) -> RequestSpec:
    blocks = tuple(range(n * 100, n * 100 + 4))
    return RequestSpec(f"r{n}", 300, 20, 20, blocks, adapter=adapter)


def _send(
    router: AdapterRouting, replicas: list[Replica], spec: RequestSpec, now: float
) -> Replica:
    """Route `spec`, load its adapter on the chosen replica as the twin's service does, submit."""
    replica = replicas[router.select(spec, replicas, now)]
    assert replica.model is not None
    if spec.adapter is not None:
        replica.load_adapter(spec.adapter, now)
    replica.model.submit(spec, now=now)
    replica.load += 1
    return replica


def _router(policy: str, scenario: Scenario) -> AdapterRouting:
    ctx = PolicyContext(scenario=scenario, model=scenario.models[0], seed=1)
    router = build("routing", policy, ctx)
    assert isinstance(router, AdapterRouting)
    return router


# -- the scenario and the workload ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("lora", "location"),
    [
        ({"adapters": 0}, "models[0].lora.adapters"),
        ({"adapters": 5, "zipf_alpha": -1}, "models[0].lora.zipf_alpha"),
        ({"adapters": 5, "max_loaded_loras": 2, "max_loras_per_batch": 3}, "models[0].lora"),
        ({"adapters": 5, "popularity": "zipf"}, "models[0].lora.popularity"),
    ],
    ids=["no-adapters", "negative-alpha", "batch-above-loaded", "unknown-field"],
)
def test_a_bad_lora_field_is_reported_where_it_is(lora: dict[str, Any], location: str) -> None:
    with pytest.raises(ConfigError) as err:
        _scenario(lora)
    assert location in str(err.value)


def test_each_request_names_an_adapter_by_zipf_popularity_and_the_seed() -> None:
    scenario = _scenario(LORA | {"adapters": 10, "zipf_alpha": 1.2})
    workload = Workload(scenario)
    ranks = workload.arrivals.adapter
    assert (ranks >= 0).all() and (ranks < 10).all()
    counts = np.bincount(ranks, minlength=10)
    assert counts[0] > counts[4] > counts[9]  # rank 1 has 5^1.2 = 6.9x rank 5's weight
    assert np.array_equal(Workload(scenario).arrivals.adapter, ranks)
    other = Workload(_scenario(LORA | {"adapters": 10, "zipf_alpha": 1.2}, seed=4))
    assert not np.array_equal(other.arrivals.adapter[:50], ranks[:50])


def test_an_adapter_keeps_its_prefixes_apart_and_the_base_model_is_unchanged() -> None:
    with_lora, without = Workload(_scenario()), Workload(_scenario(None))
    assert (without.arrivals.adapter == NO_ADAPTER).all()
    assert np.array_equal(with_lora.arrivals.t, without.arrivals.t)  # the same arrivals
    for index in range(20):
        spec, base = with_lora.spec(index), without.spec(index)
        rank = int(with_lora.arrivals.adapter[index])
        assert spec.adapter == adapter_name(rank) and base.adapter is None
        assert len(spec.prompt_blocks) == len(base.prompt_blocks)
        assert not set(spec.prompt_blocks) & set(base.prompt_blocks)


# -- routing -------------------------------------------------------------------------------------


def test_adapter_aware_routing_sends_an_adapter_request_to_a_holder() -> None:
    scenario = _scenario()
    replicas = _replicas(scenario.models[0], 4)
    router = _router("adapter_aware", scenario)
    first = _send(router, replicas, _request(0, "adapter-0007"), now=0.0)
    assert first.holds_adapter("adapter-0007")
    others = [r for r in replicas if r is not first]
    assert not any(r.holds_adapter("adapter-0007") for r in others)
    for n in range(1, 6):  # a new prompt each time: only the adapter draws it to `first`
        assert _send(router, replicas, _request(n, "adapter-0007"), now=n * 0.01) is first


def test_adapter_blind_routing_loads_the_adapter_on_a_miss() -> None:
    scenario = _scenario()
    replicas = _replicas(scenario.models[0], 4)
    router = _router("adapter_blind", scenario)
    chosen = [_send(router, replicas, _request(n, "adapter-0003"), now=n * 0.01) for n in range(8)]
    holders = {r.id for r in replicas if r.holds_adapter("adapter-0003")}
    assert holders == {r.id for r in chosen} and len(holders) > 1  # loaded wherever it landed
    loads = sum(r.model.lora.pool.loads_total for r in replicas if r.model and r.model.lora)
    assert loads == len(holders)


@given(
    adapters=st.integers(1, 60),
    groups=st.integers(1, 6),
    workers=st.integers(1, 10),
    rank=st.integers(0, 59),
)
@settings(max_examples=200, deadline=None)
def test_partitioned_never_sends_a_request_outside_its_group(
    adapters: int, groups: int, workers: int, rank: int
) -> None:
    lora = Lora(adapters=adapters)
    placement = Partitioned(lora, groups)
    views = [SimpleNamespace(id=100 - 7 * n, load=0) for n in range(workers)]
    name = adapter_name(rank % adapters)
    allowed = placement.candidates(name, views)
    live = min(groups, workers)
    by_id = sorted(range(workers), key=lambda i: views[i].id)
    group = partition(lora, groups)[rank % adapters] % live
    assert allowed and all(by_id.index(i) % live == group for i in allowed)


def test_partitioned_routing_keeps_each_adapter_on_its_group_of_replicas() -> None:
    scenario = _scenario(LORA | {"adapters": 12})
    replicas = _replicas(scenario.models[0], 4)
    router = _router("adapter_partitioned", scenario)  # two groups of two replicas
    owner = partition(scenario.models[0].lora, 2)  # type: ignore[arg-type]
    for n in range(60):
        rank = n % 12
        replica = _send(router, replicas, _request(n, adapter_name(rank)), now=n * 0.01)
        assert (replica.id - 1) % 2 == owner[rank]


def test_the_split_evens_the_expected_demand() -> None:
    lora = Lora(adapters=1000, zipf_alpha=1.0)
    shares = Counter[int]()
    weights = (np.arange(1, 1001, dtype=float) ** -1.0).tolist()
    for rank, group in enumerate(partition(lora, 4)):
        shares[group] += weights[rank]
    assert max(shares.values()) / min(shares.values()) < 1.01


@pytest.mark.parametrize("policy", ["adapter_aware", "adapter_blind", "adapter_partitioned"])
def test_the_loaded_set_never_exceeds_its_bound(policy: str) -> None:
    scenario = _scenario()
    replicas = _replicas(scenario.models[0], 4)
    router = _router(policy, scenario)
    ranks = Workload(scenario).arrivals.adapter[:300].tolist()
    for n, rank in enumerate(ranks):
        _send(router, replicas, _request(n, adapter_name(rank)), now=n * 0.05)
        for replica in replicas:
            replica.model.advance(n * 0.05)  # type: ignore[union-attr]
            assert len(replica.adapters_held()) <= LORA["max_loaded_loras"]
    assert sum(len(r.adapters_held()) for r in replicas) > LORA["max_loaded_loras"]


def test_a_lora_scenario_serves_every_request_under_each_policy() -> None:
    data = yaml.safe_load(SMALL)
    data |= {"faults": [], "duration_s": 60, "regions": data["regions"][:1]}
    data["models"][0] |= {"lora": LORA, "initial_replicas": 4, "min_replicas": 4}
    routings = {
        "dynamic": "adapter_dynamic",
        "aware": "adapter_aware",
        "partitioned": "adapter_partitioned",
        "blind": "adapter_blind",
    }
    data["policies"] = [
        {"name": name, "routing": routing, "autoscale": "fixed", "traffic": "static"}
        for name, routing in routings.items()
    ]
    outcome = run_scenario(parse_scenario(yaml.safe_dump(data), source="s.yaml"), oracles=False)
    metrics = outcome.results["metrics"]
    for name in routings:
        assert metrics[name]["requests"] > 250, name
        assert metrics[name]["failed"] == 0, name
    # Two adapters per batch, four loaded: sending an adapter where it is beats sending it anywhere.
    assert metrics["aware"]["slo_attainment"] > metrics["blind"]["slo_attainment"]


def test_the_controller_copies_a_hot_adapter_to_more_replicas_on_its_tick() -> None:
    scenario = _scenario()
    replicas = _replicas(scenario.models[0], 4)
    router = _router("adapter_dynamic", scenario)
    assert router.keeper is not None and router.keeper.tick_s == 10.0
    for n in range(100):  # 10 req/s for 10 s: five copies' worth at 2 req/s a copy
        _send(router, replicas, _request(n, "adapter-0000"), now=n * 0.1).load = 0  # done
    assert sum(r.holds_adapter("adapter-0000") for r in replicas) == 1  # before the tick
    _send(router, replicas, _request(100, "adapter-0000"), now=10.0)
    assert all(r.holds_adapter("adapter-0000") for r in replicas)  # capped at one per replica


def test_the_gpu_oracle_serves_adapter_requests_as_the_base_models() -> None:
    with_lora, without = Workload(_scenario()), Workload(_scenario(None))
    capacity = replica_capacity(with_lora, 0)
    assert capacity > 1.0  # a replica without LoRA refused every adapter request: 0.05
    assert capacity == pytest.approx(replica_capacity(without, 0), rel=0.5)
