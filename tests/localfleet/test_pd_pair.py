"""A prefill/decode pair on the local fleet, end to end: emulated prefill and decode replicas
behind the real smg 1.13.0 in PD mode, reached through the region's entry as ONE model; the pair
scales to zero and back as one, with no request lost and no decode replica registered without
a prefill peer (llm-d's open question)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from radixfleet.controllers.autoscale.localfleet_pairs import LocalFleetPairAutoscaler
from radixfleet.controllers.autoscale.pairs import pair_counts
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.localfleet import LocalFleet, LocalFleetError, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.procs import processes_with_marker
from radixfleet.localfleet.spec import DisaggregationSpec
from radixfleet.profile import ReplicaProfile
from radixfleet.replica.disagg import transfer_seconds
from radixfleet.workload.records import WorkItem
from radixfleet.workload.replay import Replayer

pytestmark = pytest.mark.fleet

REGION, MODEL = "pd", "llama-pd"
# A slow KV link (2 GB/s, 20 ms setup) so that the transfer shows in the decode's times.
LINK = {"kv_transfer_gb_s": 2.0, "kv_transfer_setup_s": 0.02}
WAKE_REQUESTS = 8


def spec() -> LocalFleetSpec:
    pair = ModelSpec(
        name=MODEL, replicas=1, disaggregation=DisaggregationSpec(prefill=1, decode=1),
        profile_overrides=LINK,
    )  # fmt: skip
    return LocalFleetSpec(
        regions=[RegionSpec(name=REGION, models=[pair])],
        cold_start_s=1.0,
        router_health_interval_s=1,
    )


# The replica sets a pre-warmer was asked for, as (region, model): a recording fake that
# pre-warms nothing.
PREWARMERS_ASKED: list[tuple[str, str]] = []


def recording_prewarmers(region: str, model: ModelSpec) -> None:
    PREWARMERS_ASKED.append((region, model.name))


@pytest.fixture(scope="module")
def fleet(cache_dir: Path) -> Iterator[LocalFleet]:
    local = LocalFleet(spec(), cache_dir=cache_dir, pair_rule=pair_counts,
                       prewarmers=recording_prewarmers)  # fmt: skip
    with local:
        yield local
    assert processes_with_marker(local.fleet_id) == [], "processes outlived the fleet"


def scrape(url: str) -> dict[str, float]:
    """A replica's unbucketed samples by name (each family has one series)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "le=" not in line:
            name, _, value = line.rpartition(" ")
            samples[name.split("{")[0]] = float(value)
    return samples


def role_urls(fleet: LocalFleet) -> tuple[list[str], list[str]]:
    pair = fleet.pair(REGION, MODEL)

    async def read() -> tuple[list[str], list[str]]:
        return [i.url for i in pair.prefill.replicas()], [i.url for i in pair.decode.replicas()]

    return fleet.run(read())


def ask(fleet: LocalFleet, count: int, *, prompt_words: int = 400) -> list[WorkItem]:
    items = [
        WorkItem(at=0.02 * i, region=REGION, model=MODEL,
                 prompt=" ".join(f"w{i}x{j}" for j in range(prompt_words)), max_tokens=6)
        for i in range(count)
    ]  # fmt: skip
    results = asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))
    assert [r.error for r in results] == [None] * count
    assert all(r.output_tokens == 6 for r in results)
    return items


def test_the_entry_serves_the_pair_as_one_model(fleet: LocalFleet) -> None:
    (prefill,), (decode,) = role_urls(fleet)
    before_p, before_d = scrape(prefill), scrape(decode)
    ask(fleet, 1)
    after_p, after_d = scrape(prefill), scrape(decode)
    # The prefill ran the prompt and one token; the decode generated the answer.
    assert (
        after_p["sglang:generation_tokens_total"] - before_p["sglang:generation_tokens_total"] == 1
    )
    assert (
        after_d["sglang:generation_tokens_total"] - before_d["sglang:generation_tokens_total"] == 6
    )
    moved = after_p["sglang:kv_transfer_total_mb_sum"] - before_p["sglang:kv_transfer_total_mb_sum"]
    assert moved > 0
    # The decode's time to first token holds the KV transfer of the prompt it received.
    prompt = after_d["sglang:prompt_tokens_total"] - before_d["sglang:prompt_tokens_total"]
    profile = ReplicaProfile(**LINK)
    ttft = (after_d["sglang:time_to_first_token_seconds_sum"]
            - before_d["sglang:time_to_first_token_seconds_sum"])  # fmt: skip
    assert ttft >= transfer_seconds(profile, int(prompt))


def test_the_pair_sleeps_and_wakes_whole_with_no_request_lost(fleet: LocalFleet) -> None:
    watch = RouterWatch(fleet)
    with watch:
        assert fleet.scale(REGION, MODEL, 0)
        assert role_urls(fleet) == ([], [])
        # smg lets a removed worker drain for a few seconds before it drops it.
        deadline = time.time() + 30
        while watch.workers() and time.time() < deadline:
            time.sleep(0.2)
        assert watch.workers() == []
        ask(fleet, WAKE_REQUESTS)  # all sent while the pair is at zero
        assert fleet.ready_count(REGION, MODEL) == 1
        prefills, decodes = role_urls(fleet)
        assert (len(prefills), len(decodes)) == (1, 1)
    assert watch.snapshots, "the router's workers were never read"
    alone = [s for s in watch.snapshots if "decode" in s and "prefill" not in s]
    assert not alone, f"a decode worker without a prefill peer: {alone[:3]}"
    kinds = [(e.replica.split("-")[-2], e.kind) for _, m, e in fleet.events() if e.replica]
    assert ("prefill", "woken") in kinds and ("decode", "woken") in kinds


class RouterWatch:
    """Reads the model's router's workers (their types) every few milliseconds, on a thread."""

    def __init__(self, fleet: LocalFleet) -> None:
        self.url = fleet.regions[REGION].routers[MODEL].url
        self.snapshots: list[list[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> RouterWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def workers(self) -> list[str]:
        """The worker types the router lists now."""
        with urllib.request.urlopen(f"{self.url}/workers", timeout=5) as answer:
            workers = json.loads(answer.read())["workers"]
        return sorted(w["worker_type"] for w in workers)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.snapshots.append(self.workers())
            time.sleep(0.02)


def test_a_pairs_roles_are_never_pre_warmed(fleet: LocalFleet) -> None:
    """A prefill answers only requests with a bootstrap room and a decode keeps no radix cache:
    neither role's replica set has a pre-warmer (controllers/autoscale/prewarm.py)."""
    assert fleet.pair(REGION, MODEL).prefill.prewarmer is None
    assert fleet.pair(REGION, MODEL).decode.prewarmer is None
    assert PREWARMERS_ASKED == []


def test_a_pd_model_needs_the_pair_rule() -> None:
    with pytest.raises(LocalFleetError, match="pair_rule"):
        LocalFleet(spec())


@pytest.mark.parametrize(
    ("prefill", "decode"), [(0, 1), (2, 0)], ids=["decode-alone", "prefill-alone"]
)
def test_a_half_pair_is_refused(prefill: int, decode: int) -> None:
    with pytest.raises(ValueError, match="at zero together or neither is"):
        DisaggregationSpec(prefill=prefill, decode=decode)


def test_a_pair_counts_its_replicas_in_pairs() -> None:
    with pytest.raises(ValueError, match="count its pairs"):
        ModelSpec(name="x", replicas=2, disaggregation=DisaggregationSpec(prefill=1, decode=3))


IDLE_S = 10


def pair_policy() -> AutoscalePolicySpec:
    return AutoscalePolicySpec.model_validate(
        {
            "inferenceService": MODEL,
            "maxReplicas": 4,
            "intervalSeconds": 1,
            "idleSeconds": IDLE_S,
            "scaleUp": {"stabilizationSeconds": 0},
            "scaleDown": {"stabilizationSeconds": 2, "periodSeconds": 0},
            "coldStart": {"seconds": 1, "budget": 1.0},  # this test wants to see zero again
        }
    )


def test_the_autoscaler_sleeps_the_pair_whole_after_idle_and_wakes_it(fleet: LocalFleet) -> None:
    pair = fleet.pair(REGION, MODEL)
    autoscaler = LocalFleetPairAutoscaler(pair=pair, entry=fleet.entry(REGION), spec=pair_policy())

    async def start() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(autoscaler.run())

    async def stop(task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def asleep() -> bool:
        return pair.replicas() == [] and pair.desired() == 0

    task = fleet.run(start())
    try:
        ask(fleet, 2)
        done_at = time.time()
        deadline = done_at + 90
        while not fleet.run(asleep()) and time.time() < deadline:
            time.sleep(0.5)
        assert fleet.run(asleep()), [c for c in autoscaler.counts[-5:]]
        assert time.time() - done_at >= IDLE_S - 1  # not before the idle window
        ask(fleet, WAKE_REQUESTS)  # the entry wakes the pair; the autoscaler keeps it up
        assert fleet.ready_count(REGION, MODEL) == 1
    finally:
        fleet.run(stop(task))
    assert all((c.prefill == 0) == (c.decode == 0) for c in autoscaler.counts)


def test_a_pair_has_no_canary_revision_yet(fleet: LocalFleet) -> None:
    with pytest.raises(LocalFleetError, match="prefill/decode pair: it has no canary"):
        fleet.create_revision(REGION, MODEL)
