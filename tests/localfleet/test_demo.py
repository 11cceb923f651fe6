"""`radixfleet demo` end to end, with a short workload: the fleet starts, eu-west-1's model wakes
from zero (and runs SGLang HiCache), every request succeeds, summary.json has its fields (the
host tier's hits and the P/D pair's KV transfers among them), report.html its plots, and no
process of the fleet is left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.localfleet.procs import processes_with_marker
from radixfleet.localfleet.prometheus import prometheus_binary

pytestmark = pytest.mark.fleet

GROUP_FIELDS = {"requests", "failed", "ttft_s", "itl_s", "throughput", "prefix_cache_hit_rate"}


def test_demo_writes_summary_and_report(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RADIXFLEET_CACHE_DIR", str(cache_dir))  # the session's tokenizer
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--duration", "6", "--rate", "4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output

    summary = json.loads((out / "summary.json").read_text())
    assert processes_with_marker(summary["demo"]["fleet_id"]) == []
    # 24 to the 8B and the 70B, and one more to the prefill/decode pair.
    assert summary["overall"]["failed"] == 0 and summary["overall"]["requests"] == 25
    for group in (
        summary["overall"],
        *summary["per_region"].values(),
        *summary["per_model"].values(),
    ):
        assert set(group) >= GROUP_FIELDS
        assert set(group["ttft_s"]) == set(group["itl_s"]) == {"p50", "p95", "p99"}
    assert set(summary["per_region"]) == {"us-east-1", "eu-west-1"}
    assert set(summary["per_model"]) == {"llama-3-1-8b", "llama-3-1-70b", "llama-3-1-70b-pd"}
    assert summary["per_model"]["llama-3-1-8b"]["prefix_cache_hit_rate"] > 0
    # smg routed the 8B's requests on the index it builds from the replicas' KV events.
    decisions = summary["routing_decisions"]["us-east-1/llama-3-1-8b"]
    assert decisions.get("event_hit", 0) + decisions.get("event_miss", 0) > 0, decisions
    assert [(w["region"], w["model"]) for w in summary["wake_from_zero"]] == [
        ("eu-west-1", "llama-3-1-8b")
    ]
    # eu-west-1's 8B runs SGLang HiCache: its hits by tier, read from its replicas' /metrics.
    (tiered,) = summary["host_tier"].items()
    assert tiered[0] == "eu-west-1/llama-3-1-8b" and tiered[1]["prompt_tokens"] > 0
    assert set(tiered[1]) >= {"device_hit_rate", "host_hit_rate", "storage_hit_rate"}
    assert "eu-west-1/llama-3-1-8b: host tier (HiCache) hit" in result.output
    # eu-west-1's 70B P/D pair: its requests' KV went from the prefill to the decode replica.
    (pair,) = summary["prefill_decode"].items()
    assert pair[0] == "eu-west-1/llama-3-1-70b-pd"
    assert pair[1]["transfers"] >= 1 and pair[1]["kv_transferred_mb"] > 0
    assert "eu-west-1/llama-3-1-70b-pd: prefill/decode pair (1+1, mooncake)" in result.output

    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    assert "eu-west-1/llama-3-1-8b" in page and "Time scale" in page
    assert (out / "rendered" / "inferenceservices").is_dir()
    if prometheus_binary() is None:
        assert any("not installed" in note for note in summary["notes"])
    else:
        # The fleet dashboard counts regions from the scrape's region labels.
        dashboards = (out / "dashboards.html").read_text()
        assert '>Regions</div><div class="stat"><span class="value">2<' in dashboards
