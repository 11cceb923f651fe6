"""Where a LoRA adapter's requests land on the local fleet: the entry's adapter-aware routing
beside smg 1.13's adapter-blind `cache_aware`, on the same replicas in one run.

One region of the local fleet (`radixfleet.localfleet`): a LoRA model on `--replicas` emulated
SGLang 0.5.23 replicas (`--enable-lora --max-loaded-loras M`, none loaded at start) behind the
real smg over HTTP; `--adapters` adapters with a Zipf popularity (`--zipf`), each request opening
with its adapter's system prompt (a 64-token block) and a question of its own. Arms, in order, on
the same fleet:

- `entry`: each request through the region entry with `lora_path`: to a replica holding the
  adapter, else loaded on demand where the LoRA controller's `place()` says;
- `smg_blind`: the very same requests (`lora_path`) sent to the model's smg router, with the
  adapters where the first arm left them: smg picks a replica without regard to the adapter.
  (smg 1.13 answers `BASE:ADAPTER` with 404 "No worker available for model": it matches the
  model name against the ids its workers reported when they registered.)

Requests go one at a time, so each one's replica is the one whose `sglang:num_requests_total`
rose; what that replica held when the request arrived is read from its `GET /v1/models` just
before. Per arm: the share of requests answered by a replica that already held the adapter, the
share refused (400: never loaded there), and the loads on the request path. Writes
benchmarks/results/lora_routing_localfleet.json (workload, seeds, machine; medians over
`--repeats` seeds, each a fresh fleet) and a plot.

    uv run python benchmarks/lora_routing_localfleet.py [--replicas 2] [--adapters 4]
        [--max-loaded 2] [--requests 60] [--seed 0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import requests
from matplotlib.figure import Figure

from radixfleet.controllers.lora.localfleet import LocalFleetAdapterPlacer
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.spec import LoraAdapterSpec
from radixfleet.machine import describe_machine
from radixfleet.metrics_names import SGLANG_REQUESTS
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.traces import TraceRequest

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
REGION, MODEL, TENANT = "local", "lora-8b", "support"


def workload(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(adapter, prompt) of each request, seeded."""
    tokenizer = load_tokenizer(None)
    synth = PromptSynth(tokenizer, salt=args.seed)
    weights = [1 / (rank + 1) ** args.zipf for rank in range(args.adapters)]
    draws = random.Random(args.seed).choices(range(args.adapters), weights=weights,
                                             k=args.requests)  # fmt: skip
    found = []
    for index, which in enumerate(draws):
        request = TraceRequest(at=0.0, input_tokens=96, output_tokens=4, block_tokens=64,
                               hash_ids=(1_000 + which, 10_000 + index))  # fmt: skip
        found.append((f"adapter-{which}", synth.prompt(request, index=index)))
    return found


def fleet_spec(args: argparse.Namespace) -> LocalFleetSpec:
    adapters = [LoraAdapterSpec(name=f"adapter-{i}", tenant=TENANT) for i in range(args.adapters)]
    model = ModelSpec(name=MODEL, replicas=args.replicas, tenants=[TENANT],
                      lora_adapters=adapters, max_loaded_loras=args.max_loaded)  # fmt: skip
    region = RegionSpec(name=REGION, models=[model], router_workers="http")
    return LocalFleetSpec(regions=[region], cold_start_s=0.5)


def requests_served(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    lines = [ln for ln in text.splitlines() if ln.startswith(SGLANG_REQUESTS)]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


def held(url: str) -> set[str]:
    models = requests.get(f"{url}/v1/models", timeout=10).json()["data"]
    return {m["id"] for m in models if m.get("parent")}


def run_arm(replicas: list[str], send_to: str, items: list[tuple[str, str]]) -> dict[str, Any]:
    """Send each request in turn; where it landed and whether that replica held its adapter."""
    on_holder = refused = loaded_on_path = 0
    for adapter, prompt in items:
        before = {url: (held(url), requests_served(url)) for url in replicas}
        body = {"model": MODEL, "lora_path": adapter, "prompt": prompt, "max_tokens": 4}
        status = requests.post(f"{send_to}/v1/completions", json=body, timeout=120).status_code
        if status == 400:
            refused += 1
            continue
        served = [url for url in replicas if requests_served(url) > before[url][1]]
        if served and adapter in before[served[0]][0]:
            on_holder += 1
        else:
            loaded_on_path += 1
    total = len(items)
    return {"requests": total, "answered_by_a_holder": round(on_holder / total, 4),
            "refused": round(refused / total, 4),
            "served_after_a_load": round(loaded_on_path / total, 4)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--max-loaded", type=int, default=2)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="seeds, each a fresh fleet")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    runs = [one_run(argparse.Namespace(**{**vars(args), "seed": args.seed + i}))
            for i in range(args.repeats)]  # fmt: skip
    medians = {arm: {key: statistics.median(run[arm][key] for run in runs)
                     for key in runs[0][arm]} for arm in runs[0]}  # fmt: skip
    result = {"benchmark": "lora_routing_localfleet", "medians": medians, "runs": runs,
              "workload": {"requests": args.requests, "adapters": args.adapters,
                           "zipf": args.zipf, "replicas": args.replicas,
                           "max_loaded_loras": args.max_loaded},
              "seeds": [args.seed + i for i in range(args.repeats)],
              "machine": describe_machine()}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lora_routing_localfleet.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(medians, args.out / "lora_routing_localfleet.png")
    print(json.dumps(medians, indent=2))


def one_run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Both arms on one fresh fleet, for one seed's requests."""
    items = workload(args)
    with tempfile.TemporaryDirectory() as work, LocalFleet(
        fleet_spec(args), workdir=Path(work), adapter_placer=LocalFleetAdapterPlacer()
    ) as fleet:  # fmt: skip
        replicas = [r.url for r in fleet.replicas(REGION, MODEL)]
        router = fleet.entry(REGION).routers[MODEL].urls[0]
        return {"entry": run_arm(replicas, fleet.entry_url(REGION), items),
                "smg_blind": run_arm(replicas, router, items)}  # fmt: skip


def plot(arms: dict[str, dict[str, Any]], path: Path) -> None:
    fig = Figure(figsize=(6, 3.2), dpi=100)
    ax = fig.add_subplot()
    names = list(arms)
    keys = ["answered_by_a_holder", "served_after_a_load", "refused"]
    bottom = [0.0] * len(names)
    for key in keys:
        values = [arms[n][key] for n in names]
        ax.bar(names, values, bottom=bottom, label=key.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("share of adapter requests")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
