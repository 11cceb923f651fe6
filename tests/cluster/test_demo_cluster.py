"""`make demo-cluster` (`python -m testbed demo`) on the session's test cluster: the demo's
replay through the region entry of a deployed radixfleet (operator, entry, smg routers, emulated
predictors as pods), with a model woken from zero and a canary judged by the in-cluster
operator."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from radixfleet.controllers.canary.spec import CanaryPolicySpec
from radixfleet.demo.run import DemoOptions
from testbed.cluster import Cluster
from testbed.demo import CANARY, POLICY, WAKES, run_cluster_demo


def test_the_demo_replays_through_a_deployed_radixfleet(
    kserve: Cluster, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path / "demo"
    tokenizer_cache = tmp_path_factory.getbasetemp() / "tokenizer-cache"
    options = DemoOptions(out=out, prometheus=False, manifests=False, cache_dir=tokenizer_cache)
    summary = run_cluster_demo(options, console=Console(file=io.StringIO()), cluster=kserve)
    assert summary["overall"]["requests"] > 100
    # On a failure, what the entry logged says why (a 502's body does not).
    why = (summary["failed_requests"], summary["entry_warnings"][-20:])
    assert summary["overall"]["failed"] == 0, why
    assert not [line for line in summary["entry_warnings"] if "] ERROR " in line], why
    assert json.loads((out / "summary.json").read_text()) == summary
    assert (out / "report.html").stat().st_size > 10_000
    roles = {p["role"] for p in summary["cluster"]["pods"]}
    assert {"operator (leader)", "operator", "entry"} <= roles
    assert any(r.startswith(f"router of {WAKES}-predictor") for r in roles), roles
    assert any(r.startswith(f"predictor of {CANARY}-predictor") for r in roles), roles
    (woke,) = summary["wake_from_zero"]
    assert woke["model"] == WAKES and woke["seconds"] > 0
    canary = summary["cluster"]["canary"]
    assert _judged_and_kept(canary), canary
    # The fleet's failover reads this region through its entry, with the fleet token only.
    view = summary["cluster"]["failover_view"]
    assert view["reachable"] and view["without_token_status"] == 401, view
    assert view["requests"] and view["requests"] > 50, view
    assert (view["ready_replicas"] or {}).get(CANARY, 0) >= 1, view
    print(
        f"\ncluster demo: {summary['overall']['requests']} requests, {WAKES} woke in "
        f"{woke['seconds']:.1f} s, canary {canary['phase']} "
        f"after {canary['seconds_since_applied']:.0f} s; steps {summary['demo']['steps_s']}"
    )


def _judged_and_kept(rollout: dict[str, Any]) -> bool:
    """A good version is never rolled back. On a busy machine a short replay may leave its
    canary halted: inconclusive (slower, not significantly), or, once the replay is over,
    with too few requests in the next window; an interval may even have failed a check (the
    new revision starts with a cold cache, its inter-token p95 measured on tens of requests),
    as long as fewer failed than the policy's threshold, which would have rolled it back.
    Any of these is the judge working, as long as it did judge: checks measured from the
    cluster's Prometheus. A halt with no analysis at all means Prometheus never saw the
    revisions, and fails."""
    if rollout["phase"] in ("Progressing", "Promoted"):
        return True
    judged = bool(rollout.get("lastAnalysisAt")) and bool(rollout.get("checks"))
    kept = rollout.get("failedChecks", 0) < CanaryPolicySpec.model_validate(POLICY).threshold
    return rollout["phase"] == "Halted" and judged and kept
