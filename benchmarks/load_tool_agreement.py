"""A load tool nobody here wrote, against the local fleet: do its numbers agree with the fleet's?

NVIDIA's AIPerf 0.13.0 (run with `uvx`, in an environment of its own: none of its 139 packages
enters radixfleet's) sends streamed chat completions at a fixed rate, with synthetic prompts of
a fixed length, to a local fleet's region entry, through the quota's token gate with a tenant's
key. Behind the entry: the real SGLang gateway (smg 1.13.0) and emulated SGLang replicas at
H100 step times. Three accounts of the same run are then compared:

- the client's (AIPerf's export: requests, input and output tokens as its tokenizer counts them,
  TTFT percentiles);
- the replicas' own (SGLang's counters `sglang:num_requests_total`, `prompt_tokens_total`,
  `generation_tokens_total`, and the TTFT histogram, each replica scraped before and after);
- the gate's (tokens charged to the tenant, `radixfleet_tenant_tokens_total`, by kind).

Agreement is a ratio per count (1.0 is exact). AIPerf counts a prompt with the model's tokenizer
(the emulator's `tokenizer.json`, given to it) but without the chat template, which the replica
counts; the output tokens must agree exactly. The difference of the mean TTFTs (exact on both sides:
the replicas' histogram sum over its count) is what the entry and smg add.
Writes `load_tool_agreement.json` and `load_tool_agreement.png` into `--out`.

    uv run python benchmarks/load_tool_agreement.py [--rate 3] [--requests 120] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import matplotlib
from prometheus_client.parser import text_string_to_metric_families

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.controllers.quota.metrics import TokenMetrics
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.machine import describe_machine

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
AIPERF = "aiperf==0.13.0"
REGION, MODEL, TENANT, KEY = "bench", "chat", "bench", "sk-bench"
# What the replicas count, summed over them: SGLang 0.5.23's names.
COUNTERS = {
    "requests": "sglang:num_requests_total",
    "prompt_tokens": "sglang:prompt_tokens_total",
    "output_tokens": "sglang:generation_tokens_total",
}
TTFT_HISTOGRAM = "sglang:time_to_first_token_seconds"


def fleet_spec(replicas: int) -> LocalFleetSpec:
    model = ModelSpec(name=MODEL, replicas=replicas, max_replicas=replicas, tenants=[TENANT])
    return LocalFleetSpec(regions=[RegionSpec(name=REGION, models=[model])])


def scrape(fleet: LocalFleet) -> dict[str, Any]:
    """Every replica's counters and TTFT histogram buckets, summed."""
    counts = dict.fromkeys(COUNTERS, 0.0)
    buckets: dict[float, float] = {}
    for replica in fleet.replicas(REGION, MODEL):
        with urllib.request.urlopen(f"{replica.url}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                for key, name in COUNTERS.items():
                    if sample.name == name:
                        counts[key] += sample.value
                if sample.name in (f"{TTFT_HISTOGRAM}_sum", f"{TTFT_HISTOGRAM}_count"):
                    key = "ttft_" + sample.name.rpartition("_")[2]
                    counts[key] = counts.get(key, 0.0) + sample.value
                if sample.name == f"{TTFT_HISTOGRAM}_bucket":
                    bound = float(sample.labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return {"counts": counts, "ttft_buckets": buckets}


def charged(metrics: TokenMetrics) -> dict[str, float]:
    """Tokens the gate charged the tenant, by kind (prompt, completion)."""
    found: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("tenant") == TENANT:
                kind = sample.labels["kind"]
                found[kind] = found.get(kind, 0.0) + sample.value
    return found


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """Prometheus's `histogram_quantile` over the run's buckets (linear within a bucket)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    rank, previous_bound, previous_count = q * counts[-1], 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank and bound != float("inf"):
            share = (rank - previous_count) / max(count - previous_count, 1e-12)
            return previous_bound + (bound - previous_bound) * share
        previous_bound, previous_count = bound, count
    return previous_bound


def run_aiperf(url: str, tokenizer_dir: str, args: argparse.Namespace, out: Path) -> Path:
    """AIPerf's profile of the entry; the path of its JSON export."""
    command = [
        "uvx", "--python", "3.11", "--from", AIPERF, "aiperf", "profile",
        "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
        "--api-key", KEY, "--tokenizer", tokenizer_dir,
        "--request-rate", str(args.rate), "--request-count", str(args.requests),
        "--random-seed", str(args.seed),
        "--isl", str(args.input_tokens), "--isl-stddev", "0",
        "--osl", str(args.output_tokens), "--osl-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--use-legacy-max-tokens",
        "--artifact-dir", str(out), "--ui", "none", "--no-auto-plot",
    ]  # fmt: skip
    subprocess.run(command, check=True)
    export = out / "profile_export_aiperf.json"
    if not export.is_file():
        raise SystemExit(f"AIPerf wrote no {export.name} in {out}")
    return export


def client_view(export: Path) -> dict[str, Any]:
    """What AIPerf measured: request count, token totals, TTFT percentiles (seconds)."""
    data = json.loads(export.read_text())
    ttft = data["time_to_first_token"]
    scale = 1e-3 if ttft.get("unit", "ms") == "ms" else 1.0
    return {
        "requests": data["request_count"]["avg"],
        "input_tokens": data["total_isl"]["avg"],  # AIPerf's tokenizer, no chat template
        "output_tokens": data["total_osl"]["avg"],
        # What the answers' `usage` said, as AIPerf read it.
        "usage_prompt_tokens": data["total_usage_prompt_tokens"]["avg"],
        "usage_completion_tokens": data["total_usage_completion_tokens"]["avg"],
        "ttft_mean_s": ttft["avg"] * scale,
        "ttft_p50_s": ttft["p50"] * scale,
        "ttft_p99_s": ttft["p99"] * scale,
        "error_rate": (data.get("request_error_rate") or {}).get("avg", 0.0),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    if shutil.which("uvx") is None:
        raise SystemExit("uvx (from uv) is needed to run AIPerf in its own environment")
    metrics = TokenMetrics(region=REGION)
    budget = TokenBudget(tokens_per_minute=10**9)
    gate = TokenGate(ledger=TokenLedger({TENANT: budget}), keys={KEY: TENANT}, metrics=metrics)
    tokenizer_dir = str(load_tokenizer().path)
    artifacts = Path(tempfile.mkdtemp(prefix="aiperf-"))  # AIPerf's own files, kept for a look
    with LocalFleet(fleet_spec(args.replicas), gates={REGION: gate}) as fleet:
        before = scrape(fleet)
        export = run_aiperf(fleet.entry_url(REGION), tokenizer_dir, args, artifacts)
        after = scrape(fleet)
    print(f"AIPerf's artifacts: {artifacts}")
    client = client_view(export)
    replicas = {k: after["counts"][k] - before["counts"][k] for k in COUNTERS}
    ttft = {
        k: after["counts"][k] - before["counts"].get(k, 0.0) for k in ("ttft_sum", "ttft_count")
    }
    replicas["ttft_mean_s"] = ttft["ttft_sum"] / ttft["ttft_count"]  # exact: sum over count
    replicas["ttft_p50_s"] = histogram_quantile(0.5, before["ttft_buckets"], after["ttft_buckets"])
    replicas["ttft_p99_s"] = histogram_quantile(0.99, before["ttft_buckets"], after["ttft_buckets"])
    gate_charged = charged(metrics)
    return {
        "tool": AIPERF,
        "workload": {"rate_per_s": args.rate, "requests": args.requests, "seed": args.seed,
                     "input_tokens": args.input_tokens, "output_tokens": args.output_tokens,
                     "replicas": args.replicas, "streamed": True, "endpoint": "chat"},
        "machine": describe_machine(),
        "client": client,
        "replicas": replicas,
        "gate_charged": gate_charged,
        "agreement": {
            "requests_client_over_replicas": client["requests"] / replicas["requests"],
            "output_client_over_replicas": client["output_tokens"] / replicas["output_tokens"],
            "output_charged_over_replicas":
                gate_charged.get("completion", 0) / replicas["output_tokens"],
            "prompt_client_over_replicas": client["input_tokens"] / replicas["prompt_tokens"],
            "prompt_usage_over_replicas":
                client["usage_prompt_tokens"] / replicas["prompt_tokens"],
            "prompt_charged_over_replicas":
                gate_charged.get("prompt", 0) / replicas["prompt_tokens"],
            # The entry's and smg's share of TTFT: means are exact on both sides (a histogram's
            # percentiles are only as fine as its buckets).
            "ttft_mean_added_s": client["ttft_mean_s"] - replicas["ttft_mean_s"],
        },
    }  # fmt: skip


def plot(result: dict[str, Any], path: Path) -> None:
    """Each count as the client, the replicas and the gate saw it, side by side."""
    client, replicas, gate = result["client"], result["replicas"], result["gate_charged"]
    groups = {
        "requests": (client["requests"], replicas["requests"], None),
        "prompt tokens": (client["input_tokens"], replicas["prompt_tokens"], gate.get("prompt")),
        "output tokens": (client["output_tokens"], replicas["output_tokens"],
                          gate.get("completion")),
    }  # fmt: skip
    figure, axes = plt.subplots(1, len(groups), figsize=(11, 3.6))
    for axis, (title, values) in zip(axes, groups.items(), strict=True):
        names = ["AIPerf", "replicas", "gate"][: 3 if values[2] is not None else 2]
        axis.bar(
            names,
            [v or 0 for v in values[: len(names)]],
            color=["#4c72b0", "#55a868", "#c44e52"][: len(names)],
        )
        axis.set_title(title)
    workload = result["workload"]
    figure.suptitle(f"{result['tool']}: {workload['requests']} streamed chats at "
                    f"{workload['rate_per_s']}/s through the local fleet's entry")  # fmt: skip
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=3.0, help="requests per second")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--input-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "load_tool_agreement.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "load_tool_agreement.png")
    print(json.dumps(result["agreement"], indent=2))


if __name__ == "__main__":
    main()
