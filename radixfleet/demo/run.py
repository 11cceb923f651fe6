"""`radixfleet demo`: run a two-region local fleet, replay a workload, report what happened.

Steps: render and validate the example catalog's manifests (in the background, while the fleet
starts); start the fleet of `demo_spec()` (eu-west-1's llama-3-1-8b at zero replicas, woken by
its first request; support's LoRA model in us-east-1, its adapters loaded on demand); start
Debian's Prometheus on it when installed; replay the demo workload open-loop with a progress bar;
render the Grafana dashboards from Prometheus; stop everything; write summary.json and
report.html and print the summary table.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from radixfleet import __version__
from radixfleet.config import ConfigError, load_catalog
from radixfleet.controllers.autoscale.pairs import pair_counts
from radixfleet.controllers.lora.localfleet import LocalFleetAdapterPlacer, LocalFleetAdapters
from radixfleet.controllers.lora.spec import AdapterPolicy
from radixfleet.dashboards import rules
from radixfleet.dashboards.html import write_dashboard_report
from radixfleet.demo.manifests import ManifestCheck, render_and_check
from radixfleet.demo.report import Wake, lora_lines, print_table, write_report, write_summary
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet.fleet import LocalFleet
from radixfleet.localfleet.lora_workload import lora_items
from radixfleet.localfleet.replica import ScaleEvent
from radixfleet.localfleet.spec import LocalFleetSpec, demo_spec
from radixfleet.localfleet.workloads import DemoWorkload, default_traces_dir, demo_workload
from radixfleet.workload.records import RequestResult
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import breakdown

QUICK_DURATION_S = 15.0
# The LoRA controller's periodic pass in the demo's minute: a copy is kept 10 s, an adapter
# unasked for 15 s unloaded (a cluster's defaults are 60 s and 300 s).
DEMO_ADAPTER_POLICY = AdapterPolicy(min_hold_s=10.0, idle_unload_s=15.0)


@dataclass(frozen=True)
class DemoOptions:
    """What `radixfleet demo` runs; the CLI's options, with their defaults."""

    out: Path
    duration_s: float = 60.0
    rate: float = 5.0  # requests per second over the whole fleet
    token_scale: float = 0.25  # prompt and answer lengths times this (CPU headroom)
    seed: int = 0
    prometheus: bool = True
    manifests: bool = True
    catalog: Path = Path("inferenceservices/catalog.yaml")
    traces_dir: Path = field(default_factory=default_traces_dir)
    cache_dir: Path | None = None  # the emulator tokenizer's cache (default: the user's)


@dataclass
class _Run:
    """What the fleet part of the demo produced."""

    results: list[RequestResult] = field(default_factory=list)
    events: list[tuple[str, str, ScaleEvent]] = field(default_factory=list)
    replay_started: float = 0.0
    fleet_id: str = ""  # the marker in every child's environment (RADIXFLEET_FLEET_ID)
    steps_s: dict[str, float] = field(default_factory=dict)  # wall time of each step
    routing: dict[str, dict[str, float]] = field(default_factory=dict)  # smg's decisions
    cache_sources: dict[str, dict[str, float]] = field(default_factory=dict)  # by tier
    kv_transfers: dict[str, dict[str, float]] = field(default_factory=dict)  # P/D pairs'
    lora: dict[str, dict[str, Any]] = field(default_factory=dict)  # by region/LoRA model
    adapter_passes: int = 0  # the LoRA controller's periodic passes (over every LoRA model)
    notes: list[str] = field(default_factory=list)

    def timed(self, step: str, since: float) -> float:
        """Record that `step` ran from `since` (monotonic) until now; return its seconds."""
        self.steps_s[step] = round(time.monotonic() - since, 2)
        return self.steps_s[step]


def run_demo(options: DemoOptions, *, console: Console) -> dict[str, Any]:
    """Run the demo; return the summary (also written to `options.out`)."""
    started = time.monotonic()
    spec = demo_spec()
    tokenizer = load_tokenizer(options.cache_dir)
    workload = demo_workload(
        spec=spec,
        tokenizer=tokenizer,
        duration_s=options.duration_s,
        rate=options.rate,
        token_scale=options.token_scale,
        seed=options.seed,
        traces_dir=options.traces_dir,
    )
    workload = _with_lora(workload, spec, tokenizer, options)
    console.print(f"workload: {len(workload.items)} requests over {options.duration_s:g} s")
    manifests = _ManifestStep(options) if options.manifests else None
    run = _run_fleet(spec, workload, options, console=console)
    check = manifests.join() if manifests is not None else None
    summary = _summary(spec, workload, options, run=run, check=check, started=started)
    write_summary(options.out, summary)
    write_report(options.out, summary=summary, results=run.results, wakes=_wakes(run))
    print_table(console, summary)
    for line in lora_lines(summary):
        console.print(line)
    console.print(f"wrote {options.out / 'summary.json'} and {options.out / 'report.html'}")
    return summary


def _run_fleet(
    spec: LocalFleetSpec, workload: DemoWorkload, options: DemoOptions, *, console: Console
) -> _Run:
    run = _Run()
    begun = time.monotonic()
    with console.status("starting the fleet (routers, replicas, entries)"):
        fleet = LocalFleet(spec, cache_dir=options.cache_dir, pair_rule=pair_counts,
                           adapter_placer=LocalFleetAdapterPlacer())  # fmt: skip
        run.fleet_id = fleet.fleet_id
        fleet.start()
    try:
        took = run.timed("fleet_start", begun)
        console.print(f"fleet up in {took:.1f} s: {fleet.entry_urls()}")
        begun = time.monotonic()
        prometheus = _start_prometheus(fleet, options, run.notes)
        run.timed("prometheus_start", begun)
        _replay(fleet, workload, run, console=console)
        run.routing = fleet.routing_decisions()
        run.cache_sources = fleet.cache_sources()
        run.kv_transfers = fleet.kv_transfers()
        run.lora = adapter_summary(fleet, passes=run.adapter_passes)
        if prometheus is not None:
            begun = time.monotonic()
            _dashboards(options.out, prometheus, run, console=console)
            run.timed("dashboards", begun)
        run.events = fleet.events()
    finally:
        begun = time.monotonic()
        with console.status("stopping the fleet"):
            fleet.stop()
        run.timed("fleet_stop", begun)
    return run


def _replay(fleet: LocalFleet, workload: DemoWorkload, run: _Run, *, console: Console) -> None:
    begun = time.monotonic()
    run.replay_started = time.time()
    replayer = Replayer(entries=fleet.entry_urls(), console=console)
    with _adapter_controller(fleet) as controller:
        run.results = asyncio.run(replayer.run(workload.items))
    run.adapter_passes = len(controller.decisions)
    run.timed("replay", begun)


@contextlib.contextmanager
def _adapter_controller(fleet: LocalFleet) -> Iterator[LocalFleetAdapters]:
    """The LoRA controller's periodic pass over the fleet's LoRA models, on the fleet's loop,
    while the block runs."""
    routers = {f"{r.name}/{model}": router for r in fleet.spec.regions
               for model, router in fleet.entry(r.name).adapters.items()}  # fmt: skip
    stop = threading.Event()
    controller = LocalFleetAdapters(routers, policy=DEMO_ADAPTER_POLICY)
    thread = threading.Thread(target=fleet.run, args=(controller.run(stop),), daemon=True)
    if routers:
        thread.start()
    try:
        yield controller
    finally:
        stop.set()
        if routers:
            thread.join(timeout=30)


def _start_prometheus(fleet: LocalFleet, options: DemoOptions, notes: list[str]) -> str | None:
    if not options.prometheus:
        notes.append("Prometheus: disabled (--no-prometheus), so no dashboards.")
        return None
    rule_file = _rule_file(fleet.workdir, options.catalog, notes)
    try:
        url = fleet.start_prometheus(rule_files=[rule_file] if rule_file else None)
    except RuntimeError as err:
        notes.append(f"Prometheus failed to start ({err}), so no dashboards.")
        return None
    if url is None:
        notes.append(
            "Prometheus is not installed (Debian's `prometheus` package; scripts/provision.sh "
            "installs it), so no dashboards were rendered."
        )
    return url


def _rule_file(workdir: Path, catalog: Path, notes: list[str]) -> Path | None:
    try:
        loaded = load_catalog(catalog)
    except (ConfigError, OSError):
        notes.append(f"No catalog at {catalog}: Prometheus ran without radixfleet's rules.")
        return None
    path = workdir / "scrape" / "rules.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    # Evaluated every second, not every 30 s: the demo's whole replay lasts about a minute.
    path.write_text(yaml.safe_dump(rules.rule_file(loaded, interval="1s"), sort_keys=False))
    return path


def _dashboards(out: Path, prometheus: str, run: _Run, *, console: Console) -> None:
    with console.status("rendering the Grafana dashboards from Prometheus"):
        time.sleep(2.0)  # two more scrapes, so the last seconds of the replay are in
        path = write_dashboard_report(out, prometheus, run.replay_started, time.time())
    run.notes.append(f"Grafana dashboards from the fleet's Prometheus: {path.name}.")


class _ManifestStep:
    """Render and check the catalog's manifests on a thread, while the fleet starts."""

    def __init__(self, options: DemoOptions) -> None:
        self._options = options
        self._check: ManifestCheck | None = None
        self._thread = threading.Thread(target=self._run, name="manifests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._check = render_and_check(self._options.catalog, self._options.out / "rendered")

    def join(self) -> ManifestCheck | None:
        self._thread.join()
        return self._check


def _wakes(run: _Run) -> list[Wake]:
    """Each wake from zero, paired with the replica's readiness that ended it."""
    wakes, pending = [], {}
    for region, model, event in run.events:
        if event.kind == "wake":
            pending[(region, model)] = event.at
        elif event.kind == "woken" and (region, model) in pending:
            at = pending.pop((region, model))
            wakes.append(Wake(region, model, at - run.replay_started, event.at - at))
    return wakes


def _summary(
    spec: LocalFleetSpec,
    workload: DemoWorkload,
    options: DemoOptions,
    *,
    run: _Run,
    check: ManifestCheck | None,
    started: float,
) -> dict[str, Any]:
    return {
        "radixfleet_version": __version__,
        "demo": {
            "wall_time_s": round(time.monotonic() - started, 2),
            "steps_s": run.steps_s,
            "fleet_id": run.fleet_id,
            "duration_s": options.duration_s,
            "rate": options.rate,
            "seed": options.seed,
            "token_scale": options.token_scale,
            "time_scale": spec.time_scale,
            "cold_start_s": spec.cold_start_s,
            "time_scale_note": time_scale_note(spec, options),
            "fleet": spec.model_dump(),
        },
        "workload": {"requests": len(workload.items), "models": workload.description},
        **breakdown(run.results),
        "wake_from_zero": _wake_records(run.events),
        "routing_decisions": run.routing,
        "host_tier": host_tier_summary(spec, run.cache_sources),
        "prefill_decode": pd_summary(spec, run.kv_transfers),
        "lora": run.lora,
        "failed_requests": failed_requests(run.results),
        "notes": [*run.notes, *_manifest_notes(check, options), *_method_notes()],
    }


def _with_lora(
    workload: DemoWorkload, spec: LocalFleetSpec, tokenizer: Any, options: DemoOptions
) -> DemoWorkload:
    """The demo's workload and its LoRA models' requests, in time order."""
    items, described = lora_items(spec, tokenizer, duration_s=options.duration_s,
                                  rate=options.rate, seed=options.seed)  # fmt: skip
    merged = sorted([*workload.items, *items], key=lambda item: item.at)
    return DemoWorkload(items=merged, description={**workload.description, **described})


def adapter_summary(fleet: LocalFleet, *, passes: int) -> dict[str, dict[str, Any]]:
    """Per region/LoRA model: requests by adapter, loads (on demand among them), unloads, and
    the share of adapter requests a replica holding the adapter answered."""
    out = {}
    for region in fleet.spec.regions:
        for model, router in fleet.entry(region.name).adapters.items():
            stats = router.stats
            out[f"{region.name}/{model}"] = {
                "requests_by_adapter": dict(sorted(stats.requests.items())),
                "loads": stats.loads, "on_demand_loads": stats.on_demand_loads,
                "unloads": stats.unloads,
                "answered_by_holder": round(stats.holder_fraction, 4),
                "controller_passes": passes,
            }  # fmt: skip
    return out


def host_tier_summary(
    spec: LocalFleetSpec, sources: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Per region/model running SGLang HiCache, its replicas' prompt tokens and the share
    cached on the GPU, on the host tier and in storage (their /metrics at the end)."""
    out = {}
    for region in spec.regions:
        for model in region.models:
            name = f"{region.name}/{model.name}"
            counts = sources.get(name, {})
            prompt = counts.get("prompt_tokens", 0.0)
            if not model.hicache or not prompt:
                continue
            out[name] = {"prompt_tokens": prompt} | {
                f"{tier}_hit_rate": round(counts.get(tier, 0.0) / prompt, 4)
                for tier in ("device", "host", "storage")
            }
    return out


def pd_summary(
    spec: LocalFleetSpec, transfers: dict[str, dict[str, float]]
) -> dict[str, dict[str, Any]]:
    """Per region/model served as a prefill/decode pair: its roles' replicas, its transfer
    backend and the KV its prefill replicas sent (their /metrics at the end)."""
    out = {}
    for region in spec.regions:
        for model in region.models:
            pd = model.disaggregation
            if pd is None:
                continue
            name = f"{region.name}/{model.name}"
            moved = transfers.get(name, {})
            count = moved.get("transfers", 0.0)
            mean_ms = round(moved.get("latency_ms", 0.0) / count, 2) if count else None
            out[name] = {
                "prefill": pd.prefill, "decode": pd.decode,
                "transfer_backend": pd.transfer_backend,
                "kv_transferred_mb": round(moved.get("mb", 0.0), 1), "transfers": int(count),
                "mean_transfer_ms": mean_ms,
            }  # fmt: skip
    return out


def failed_requests(results: Sequence[RequestResult], *, limit: int = 20) -> list[dict[str, Any]]:
    """The first failed requests and why (status, error), for the summary and the CLI."""
    failed = [r for r in results if not r.ok][:limit]
    return [{"region": r.region, "model": r.model, "at_s": round(r.scheduled, 2),
             "status": r.status, "error": r.error} for r in failed]  # fmt: skip


def time_scale_note(spec: LocalFleetSpec, options: DemoOptions) -> str:
    """What the demo's clocks mean, for the report."""
    block = round(512 * options.token_scale)
    return (
        f"Time scale: replicas step at the H100 calibration's real speed x{spec.time_scale:g} "
        f"(CALIBRATION.md); a replica woken from zero pays a {spec.cold_start_s:g} s cold start "
        "(45-90 s on a real H100 node) plus its process start on this machine. The traces are "
        f"compressed in time to {options.duration_s:g} s and their token counts scaled by "
        f"{options.token_scale:g} (a 512-token Mooncake block becomes {block} tokens), so "
        "latencies are those of shorter prompts at H100 speed, measured on loopback."
    )


def _wake_records(events: Sequence[tuple[str, str, ScaleEvent]]) -> list[dict[str, Any]]:
    return [
        {"region": region, "model": model, "replica": e.replica, "seconds": round(e.seconds, 2)}
        for region, model, e in events
        if e.kind == "woken" and e.seconds is not None
    ]


def _manifest_notes(check: ManifestCheck | None, options: DemoOptions) -> list[str]:
    if check is None:
        return ["Manifests: skipped (--no-manifests)."]
    if not check.ok:
        return [f"Manifests of {options.catalog}: {len(check.problems)} problems: "
                + "; ".join(check.problems[:3])]  # fmt: skip
    return [
        f"Manifests: {check.files} files rendered from {options.catalog} into "
        f"{check.out_dir}, 0 problems against the KServe/Knative CRDs and SGLang's flags; "
        f"kubectl kustomize: {check.kustomize}."
    ]


def _method_notes() -> list[str]:
    return [
        "TTFT: from sending the request to its first streamed token; ITL: the gap before each "
        "later chunk divided by the tokens in it. Percentiles over successful requests.",
        "Prefix cache hit rate: cached prompt tokens over prompt tokens, as the replicas "
        "reported them in each answer's usage (prompt_tokens_details.cached_tokens); ideal: "
        "what an unlimited cache per region would have hit on the same requests.",
        "Routing: the SGLang gateway smg (cache_aware) per model; the replicas speak SGLang's "
        "gRPC protocol to it and stream their KV-cache events, so it routes on what each "
        "replica really holds.",
        "Throughput: successful requests and output tokens over each group's own window.",
        "Host tier: eu-west-1's llama-3-1-8b replicas run SGLang HiCache "
        "(--enable-hierarchical-cache, a host pool four times a GPU cache cut to 24k tokens); "
        "its hit rates by tier are the replicas' own sglang:cached_tokens_total{cache_source} "
        "over their prompt tokens.",
        "Prefill/decode: eu-west-1's llama-3-1-70b-pd is one prefill and one decode replica "
        "behind smg in PD mode; its KV transferred is the prefill's sglang:kv_transfer_total_mb, "
        "priced over a 50 GB/s per-GPU link (radixfleet/replica/disagg.py).",
    ]
