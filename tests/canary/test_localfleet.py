"""The canary controller on the local fleet, judged by a real Prometheus scraping the replicas.

One region serves model "llama" from one emulated replica behind smg; each test rolls
out a new revision beside it (its own router and replica, cold-started) and lets the real
`Controller` (observe through `HttpPrometheus` and `radixfleet/controllers/canary/queries.py`, pure
`decide`, act on the fleet standing in for KServe) step the entry's split. Steps, interval and
minRequests are small so that a rollout takes seconds, and latency tolerances fit this machine's
jitter.

"Noisy" is the workload, and the machine: `radixfleet.controllers.canary.localfleet.NoisyTraffic`
(40 requests/s of prompts of 100 to 1,000 tokens, log-uniform, and 4 to 16 output tokens in Poisson
arrivals), so a window's p95 rests on a few dozen uneven requests, served by replicas that share two
busy cores with everything else (their latencies jitter with it).

Losing no request: clients retry a 5xx answered before any token once (`Replayer(retries=1)`),
as OpenAI's SDK does (twice by default). A request counts as lost when it still fails; the only
ones allowed to are the 5%-error canary's, on its own injected error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from radixfleet.controllers.canary.localfleet import RolloutRun
from radixfleet.controllers.canary.localfleet import roll_out as roll_out_on_fleet
from radixfleet.controllers.canary.queries import RESPONSES, QueryConfig, selector
from radixfleet.controllers.canary.state import Phase
from radixfleet.dashboards import promql
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.procs import processes_with_marker

pytestmark = [pytest.mark.fleet, pytest.mark.prometheus, pytest.mark.slow]

REGION, MODEL, NS = "local", "llama", "team-a"
MAX_S = 45.0  # a rollout not final by then fails the test
# Three steps up to 50%: a window of n canary requests passes the error check (at most 1% above
# stable) only with no error at all, 0.95^n at 5% errors, so every step is one more chance to
# catch a bad canary before promotion; with about 30, 55 and 80 canary requests in the three 4 s
# windows a 5% canary is promoted about once in 1,500 runs. Above 50% one replica would carry
# more than the other on two shared cores, and a good canary would look slow.
# Tolerances: on this machine two identical replicas' 4-5 s p95s differ by up to 1.2x (TTFT) and
# 2x (ITL, tens of milliseconds, where CPU jitter dominates); the defaults (1.25x) assume GPU-bound
# latencies over 60 s windows. A canary slowed twofold measures 2.3-4x on TTFT and 3-7x on ITL.
POLICY = {
    "steps": [20, 35, 50],
    "intervalSeconds": 4,
    "threshold": 2,
    "minRequests": 10,
    "checks": [
        {"metric": "ttftP95", "relativeToStable": 1.5},
        {"metric": "itlP95", "relativeToStable": 2.0},
        {"metric": "errorRate", "relativeToStable": 1.0, "slack": 0.01},
    ],
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalFleet, str]]:
    model = ModelSpec(name=MODEL, namespace=NS, replicas=1)
    # The canary judges the replicas' own HTTP responses (sglang:http_responses_total), which
    # the in-cluster data plane produces (routers reach predictors over HTTP, through Knative's
    # queue-proxy); a gRPC replica's requests never pass SGLang's HTTP middleware.
    region = RegionSpec(name=REGION, models=[model], router_workers="http")
    spec = LocalFleetSpec(regions=[region], cold_start_s=0.5)
    local = LocalFleet(spec, cache_dir=tmp_path_factory.getbasetemp() / "tokenizer-cache")
    with local:
        url = local.start_prometheus()
        if url is None:
            pytest.skip("Prometheus is not installed")
        yield local, url
    assert processes_with_marker(local.fleet_id) == [], "processes outlived the fleet"


def roll_out(
    fleet: LocalFleet,
    prometheus: str,
    *,
    seed: int,
    slowdown: float = 1.0,
    errors: float = 0.0,
    baseline: bool = False,
) -> RolloutRun:
    return roll_out_on_fleet(
        fleet, prometheus, region=REGION, model=MODEL, namespace=NS,
        spec={**POLICY, "baseline": baseline}, seed=seed, slowdown=slowdown, errors=errors,
        max_s=MAX_S,
    )  # fmt: skip


def served_side_by_side(
    prometheus: str, *, stable: str, canary: str, start: float, end: float
) -> tuple[float, float]:
    """The requests the baseline and the canary answered from the baseline's first scrape to its
    last: over the same span, not a judged window, which may begin before the baseline (its
    replicas start cold, and a window in which it served half the time is still judged)."""

    def served(revision: str, *, baseline: bool) -> dict[float, float]:
        sel = selector(namespace=NS, revision=revision, config=QueryConfig(), baseline=baseline)
        expr = f'sum({RESPONSES}{{{sel},endpoint=~"{QueryConfig().endpoints}"}})'
        found = promql.query_range(prometheus, expr, start=start, end=end, step=1)
        return dict(found[0].points) if found else {}

    by_baseline, by_canary = served(stable, baseline=True), served(canary, baseline=False)
    both = sorted(by_baseline.keys() & by_canary.keys())
    assert len(both) >= 2, (by_baseline, by_canary)
    first, last = both[0], both[-1]
    return by_baseline[last] - by_baseline[first], by_canary[last] - by_canary[first]


def test_a_good_canary_with_noisy_metrics_is_promoted(fleet: tuple[LocalFleet, str]) -> None:
    local, prometheus = fleet
    run = roll_out(local, prometheus, seed=1)
    assert run.status.phase is Phase.PROMOTED, run.history()
    assert local.revisions(REGION, MODEL).stable == run.revision
    assert run.lost == []


def test_a_canary_slowed_twofold_is_rolled_back(fleet: tuple[LocalFleet, str]) -> None:
    local, prometheus = fleet
    run = roll_out(local, prometheus, seed=2, slowdown=2.0)
    assert run.status.phase is Phase.ROLLED_BACK, run.history()
    failed = {check.metric for check in run.status.checks if not check.passed}
    assert failed & {"ttftP95", "itlP95"}, run.history()
    assert local.revisions(REGION, MODEL).canary_percent == 0
    assert run.lost == []


def test_a_canary_returning_5_percent_errors_is_rolled_back(
    fleet: tuple[LocalFleet, str],
) -> None:
    local, prometheus = fleet
    run = roll_out(local, prometheus, seed=3, errors=0.05)
    assert run.status.phase is Phase.ROLLED_BACK, run.history()
    assert "errorRate" in {check.metric for check in run.status.checks if not check.passed}
    # smg does not retry a worker's 500 (sglang-router did), so a request that draws the
    # canary's injected error on both tries fails (0.05 x 0.05 per request on the canary).
    # Those are the bad canary's doing; the rollout's own moves must lose nothing else.
    assert all("(injected)" in lost for lost in run.lost), run.lost
    assert len(run.lost) <= max(3, len(run.results) // 100), run.lost
    exported = run.rollouts.controller.metrics
    assert exported is not None
    value = exported.registry.get_sample_value
    labels = {"namespace": NS, "isvc": MODEL}
    assert value("radixfleet_canary_decisions_total", {**labels, "decision": "rollback"}) == 1
    assert value("radixfleet_canary_check_failed", {**labels, "check": "error_ratio"}) == 1
    assert value("radixfleet_canary_weight", labels) == 0
    # Both revisions stay scraped, each under its own label: the canary is pinned, not gone.
    targets = local.replica_targets_file.read_text()
    revisions = local.revisions(REGION, MODEL)
    assert f'"revision": "{revisions.stable}"' in targets
    assert f'"revision": "{revisions.canary}"' in targets


@pytest.mark.parametrize(
    ("slowdown", "verdict"),
    [(1.0, Phase.PROMOTED), (2.0, Phase.ROLLED_BACK)],
    ids=["good", "twice-slower"],
)
def test_beside_a_baseline_the_canary_is_judged_against_it_and_the_baseline_ends_with_it(
    fleet: tuple[LocalFleet, str], slowdown: float, verdict: Phase
) -> None:
    """The stable model on fresh replicas of its own gets the canary's share; its replicas are
    scraped as the stable revision's with pool "baseline", and stop when the rollout ends."""
    local, prometheus = fleet
    stable = local.revisions(REGION, MODEL).stable
    started = time.time()
    run = roll_out(local, prometheus, seed=4, slowdown=slowdown, baseline=True)
    assert run.status.phase is verdict, run.history()
    assert run.status.measured is not None and run.status.measured.baseline is not None
    # While the baseline served, it served about what the canary did (the same share).
    baseline, canary = served_side_by_side(
        prometheus, stable=stable, canary=run.revision, start=started, end=time.time()
    )
    # Within 2.5x either way: at 40 requests each, Poisson arrivals stray further once in 5,000.
    assert canary >= 20 and 0.4 <= baseline / canary <= 2.5, (baseline, canary, run.history())
    judged = [
        d.status.measured for _, d in run.rollouts.decisions if d.status and d.status.measured
    ]
    assert judged and all(m.baseline is not None for m in judged), run.history()
    assert run.lost == []
    # Released with the rollout: its replicas and router stop, and are no longer scraped.
    assert local.revisions(REGION, MODEL).baseline_ready is None
    # Both target files are rewritten once the processes have stopped: wait for each.
    targets = (local.replica_targets_file, local.router_targets_file)
    deadline = time.monotonic() + 60
    while any('"baseline"' in t.read_text() for t in targets) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert '"baseline"' not in local.replica_targets_file.read_text()
    assert '"baseline"' not in local.router_targets_file.read_text()
    after = local.revisions(REGION, MODEL).stable
    assert after == (run.revision if verdict is Phase.PROMOTED else stable)
