"""HiCache's tiers in the twin: the scenario's `kv_tiers`, the replicas built with them, the
results by tier, routing that credits the host tier, and the long-document QA source."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.config.errors import ConfigError
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaModel, RequestSpec
from radixfleet.replica.tiers import HostTierSpec, WritePolicy
from radixfleet.twin.epochs import run_policy
from radixfleet.twin.load import parse_scenario
from radixfleet.twin.registry import PolicyContext, build
from radixfleet.twin.report import tiers_table
from radixfleet.twin.results import policy_metrics
from radixfleet.twin.routing import TieredCacheAware, spill_margin
from radixfleet.twin.scenario import Model, RouterSettings
from radixfleet.twin.service import Replica, kv_tiers
from radixfleet.twin.workload import Workload
from tests.twin.conftest import SMALL

BLOCK = 64
PROFILE = ReplicaProfile()  # h100-llama-3.1-8b: 128 KiB of KV per token


def _scenario_text(**model: object) -> str:
    data = yaml.safe_load(SMALL)
    data["models"][0].update(model)
    return yaml.safe_dump(data)


# -- the scenario's field ------------------------------------------------------------------------


def test_kv_tiers_give_each_replica_a_host_tier_and_the_model_one_storage() -> None:
    text = _scenario_text(kv_tiers={"host_gib": 200, "storage_gib": 2048})
    model = parse_scenario(text, source="s.yaml").models[0]
    host, storage = kv_tiers(model, PROFILE)
    assert host is not None and storage is not None
    assert host.tokens == 200 * 2**30 // PROFILE.kv_bytes_per_token == 1_638_400
    assert host.write_policy is WritePolicy.WRITE_THROUGH
    assert storage.capacity_tokens == 2048 * 2**30 // PROFILE.kv_bytes_per_token
    assert kv_tiers(Model(name="m", pool="p"), PROFILE) == (None, None)


@pytest.mark.parametrize(
    ("tiers", "location", "words"),
    [
        ({"host_gib": 0}, "models[0].kv_tiers.host_gib", "greater than 0"),
        ({"host_gib": 1, "storage_gib": -2}, "models[0].kv_tiers.storage_gib", "greater than 0"),
        ({"host_gib": 1, "write_policy": "write_sometimes"}, "models[0].kv_tiers.write_policy", ""),
        ({"host_gib": 0.001}, "models[0].kv_tiers.host_gib", "holds no cache block"),
        ({"storage_gib": 10}, "models[0].kv_tiers.host_gib", "required"),
        ({"host_gib": 1, "disk_gib": 1}, "models[0].kv_tiers.disk_gib", "unknown field"),
    ],
    ids=["zero-host", "negative-storage", "unknown-policy", "tiny-host", "no-host", "unknown-key"],
)
def test_bad_kv_tiers_are_reported_as_file_entry_field(
    tiers: dict[str, object], location: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(_scenario_text(kv_tiers=tiers), source="bad.yaml")
    messages = [str(p) for p in caught.value.problems]
    assert any(m.startswith(f"bad.yaml: {location}") and words in m for m in messages), messages


# -- a run with tiers ----------------------------------------------------------------------------

TIERED_RUN = {
    "name": "tiered",
    "seed": 5,
    "duration_s": 120.0,
    "regions": [{"name": "r1", "gpu_pools": [{"name": "h100", "gpus": 2}]}],
    "models": [
        {
            "name": "m",
            "pool": "h100",
            "min_replicas": 2,
            "initial_replicas": 2,
            "max_replicas": 2,
            # Each GPU holds about ten of the forty documents; a host tier of 200 GiB all.
            "profile": "h100-llama-3.1-8b",
        }
    ],
    "tenants": [{"name": "t", "model": "m"}],
    "workload": {
        "sources": [
            {"kind": "long_doc_qa", "tenant": "t", "rate_rps": 2.0, "documents": 40,
             "document_tokens_min": 30_000, "document_tokens_max": 50_000, "zipf_s": 0.0}
        ]
    },
    "policies": [{"name": "p", "routing": "smg_cache_aware_tiered", "autoscale": "fixed",
                  "traffic": "static"}],
}  # fmt: skip


def _run(**model: object) -> dict[str, object]:
    data = yaml.safe_load(yaml.safe_dump(TIERED_RUN))
    data["models"][0].update(model)
    scenario = parse_scenario(yaml.safe_dump(data), source="tiered.yaml")
    workload = Workload(scenario)
    return policy_metrics(run_policy(scenario, scenario.policies[0], workload), workload)


def test_a_host_tier_serves_what_the_gpu_evicted_and_results_say_by_tier() -> None:
    gpu_only, tiered = _run(), _run(kv_tiers={"host_gib": 200})
    assert "prefix_hit_rate_by_tier" not in gpu_only
    by_tier = tiered["prefix_hit_rate_by_tier"]
    assert isinstance(by_tier, dict) and by_tier["host"] > 0.1 and by_tier["storage"] == 0
    assert sum(by_tier.values()) == pytest.approx(tiered["prefix_hit_rate"])
    assert tiered["prefix_hit_rate"] > gpu_only["prefix_hit_rate"] + 0.1  # type: ignore[operator]
    used = tiered["host_gib_used_peak"]
    assert isinstance(used, float) and 0 < used <= tiered["host_gib_allocated_peak"] == 400


# -- routing that credits the tiers ------------------------------------------------------------


@dataclass
class Worker:
    id: int
    load: int = 0
    gpu: int = 0  # leading blocks of the prompt on its GPU
    host: int = 0  # and past them, on its host tier

    def cached_prefix(self, blocks: Sequence[Hashable]) -> int:
        return self.gpu + self.host

    def tiered_prefix(self, blocks: Sequence[Hashable]) -> tuple[int, int]:
        return self.gpu, self.host


PROMPT_BLOCKS = 100


def spec() -> RequestSpec:
    blocks = tuple(range(PROMPT_BLOCKS))
    return RequestSpec(
        rid="r",
        prompt_tokens=PROMPT_BLOCKS * BLOCK + 1,
        output_tokens=1,
        max_new_tokens=1,
        prompt_blocks=blocks,
    )


def tiered(**settings: float) -> TieredCacheAware:
    return TieredCacheAware(RouterSettings(**settings), block_tokens=BLOCK, seed=0, profile=PROFILE)


def test_the_tiered_policy_is_built_by_name_with_the_models_profile() -> None:
    scenario = parse_scenario(_scenario_text(), source="s.yaml")
    ctx = PolicyContext(scenario=scenario, model=scenario.models[0], seed=1)
    assert isinstance(build("routing", "smg_cache_aware_tiered", ctx), TieredCacheAware)


def test_a_host_holder_beats_a_miss() -> None:
    workers = [Worker(0), Worker(1, host=80), Worker(2)]
    assert tiered().select(spec(), workers, 0.0) == 1


def test_a_gpu_holder_beats_a_host_holder_at_equal_depth() -> None:
    for order in ([Worker(0, host=80), Worker(1, gpu=80)], [Worker(1, gpu=80), Worker(0, host=80)]):
        assert order[tiered().select(spec(), order, 0.0)].id == 1


def test_a_deeper_host_prefix_wins_only_when_it_saves_more_time() -> None:
    policy = tiered()
    tokens = spec().prompt_tokens
    # A host block saves its recompute less its transfer: most of a GPU block's saving.
    assert policy.saving(tokens, 0, 80) < policy.saving(tokens, 80, 0)
    assert policy.saving(tokens, 0, 90) > policy.saving(tokens, 80, 0)
    assert policy.select(spec(), [Worker(0, gpu=80), Worker(1, host=90)], 0.0) == 1
    # Slow links: loading costs more than it saves over the shallower GPU prefix.
    slow = TieredCacheAware(
        RouterSettings(), block_tokens=BLOCK, seed=0,
        profile=PROFILE.model_copy(update={"host_to_device_gb_s": 2.0}),
    )  # fmt: skip
    assert slow.saving(tokens, 0, 90) < slow.saving(tokens, 80, 0)
    assert slow.select(spec(), [Worker(0, gpu=80), Worker(1, host=90)], 0.0) == 0


def test_a_shallow_match_is_a_miss_to_the_least_loaded() -> None:
    workers = [Worker(0, load=3, host=20), Worker(1, load=1)]
    assert tiered().select(spec(), workers, 0.0) == 1  # 20 of 100 blocks: under 0.3


workers_strategy = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, PROMPT_BLOCKS), st.integers(0, PROMPT_BLOCKS)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(rows=workers_strategy, seed=st.integers(0, 1000))
def test_the_chosen_workers_saving_is_maximal_among_those_not_spilled(
    rows: list[tuple[int, int, int]], seed: int
) -> None:
    workers = [
        Worker(i, load=load, gpu=gpu, host=min(host, PROMPT_BLOCKS - gpu))
        for i, (load, gpu, host) in enumerate(rows)
    ]
    policy = TieredCacheAware(
        RouterSettings(cache_threshold=0.0), block_tokens=BLOCK, seed=seed, profile=PROFILE
    )
    chosen = policy.select(spec(), workers, 0.0)
    tokens = spec().prompt_tokens
    savings = [policy.saving(tokens, w.gpu, w.host) for w in workers]
    mean = sum(w.load for w in workers) / len(workers)
    ceiling = max(mean * 1.5, mean + spill_margin(64, mean))
    unspilled = [i for i, w in enumerate(workers) if w.load <= ceiling] or range(len(workers))
    if any(w.gpu + w.host for w in workers):
        assert chosen in unspilled
        assert savings[chosen] == max(savings[i] for i in unspilled)


# -- the long-document QA source ---------------------------------------------------------------


def _long_doc(**source: object) -> Workload:
    data = yaml.safe_load(yaml.safe_dump(TIERED_RUN))
    data["workload"]["sources"][0].update(source)
    return Workload(parse_scenario(yaml.safe_dump(data), source="docs.yaml"))


def test_long_doc_questions_share_their_documents_blocks_and_nothing_else() -> None:
    workload = _long_doc(rate_rps=5.0, question_tokens=200)
    specs = [workload.spec(i) for i in range(len(workload.arrivals))]
    groups = workload.shapes[0].group[workload.arrivals.record].tolist()
    assert len(specs) == pytest.approx(5.0 * 120, rel=0.15)  # Poisson at the rate
    documents: dict[int, tuple[Hashable, ...]] = {}
    for group, request in zip(groups, specs, strict=True):
        doc_blocks = (request.prompt_tokens - 200) // BLOCK
        assert 30_000 <= doc_blocks * BLOCK <= 50_000
        document = documents.setdefault(group, request.prompt_blocks[:doc_blocks])
        assert request.prompt_blocks[:doc_blocks] == document
    own = [set(s.prompt_blocks[(s.prompt_tokens - 200) // BLOCK :]) for s in specs]
    assert len(set().union(*own)) == sum(len(blocks) for blocks in own)  # no two share one


def test_long_doc_popularity_is_zipf() -> None:
    counts = np.bincount(_long_doc(zipf_s=1.2, rate_rps=20.0).shapes[0].group, minlength=40)
    expected = np.arange(1, 41, dtype=float) ** -1.2
    expected /= expected.sum()
    assert counts[0] > counts[1] > counts[5] > counts[35]
    assert counts[0] / counts.sum() == pytest.approx(expected[0], rel=0.05)


def test_long_doc_sizes_are_checked() -> None:
    with pytest.raises(ConfigError, match="document_tokens_min is above"):
        _long_doc(document_tokens_min=70_000)


def test_the_report_shows_the_tiers_only_for_a_scenario_with_them() -> None:
    assert tiers_table({"metrics": {"p": {"prefix_hit_rate": 0.5}}}) == ""
    by_tier = {"device": 0.2, "host": 0.3, "storage": 0.0}
    values = {"prefix_hit_rate_by_tier": by_tier, "host_gib_used_peak": 10.0}
    table = tiers_table({"metrics": {"p": values}})
    assert "<td>30.0%</td>" in table and "<td>10.0</td>" in table


def test_smgs_event_index_sees_a_twin_replicas_host_tier_as_the_real_smg_does() -> None:
    # The real smg 1.13 routes a prompt back to the replica holding it on its host tier
    # (tests/test_emulator_hicache_router.py): the twin's replicas tell its index the same.
    small = PROFILE.model_copy(update={"kv_capacity_tokens": 4096})
    tiered_model = ReplicaModel(
        profile=small,
        now=0.0,
        warm=True,
        block_tokens=BLOCK,
        host_tier=HostTierSpec(tokens=1 << 16),
    )
    blocks = {group: tuple((group, i) for i in range(1024 // BLOCK)) for group in range(6)}
    now = 0.0
    for group in range(6):  # the first is evicted from the GPU to the host
        request = tiered_model.submit(
            RequestSpec(rid=str(group), prompt_tokens=1024, output_tokens=2, max_new_tokens=2,
                        prompt_blocks=blocks[group]),
            now=now,
        )  # fmt: skip
        while not request.done:
            now = tiered_model.next_event_time() or now
            tiered_model.advance(now)
    replica = Replica.__new__(Replica)
    replica.model = tiered_model
    assert tiered_model.cache.cached_prefix(blocks[0]) == 0
    assert replica.tiered_prefix(blocks[0]) == (0, len(blocks[0]))
    assert replica.cached_prefix(blocks[0]) == len(blocks[0])
