"""`radixfleet twin run` and `radixfleet bench`: the twin's command line.

`twin run` replays one scenario under each of its policy sets and writes DIR/results.json,
DIR/timing.json, plots and DIR/report.html. `bench` runs the standard scenarios of
`benchmarks/scenarios/` in one go and writes DIR/bench.json and DIR/report.html. A scenario
with any problem is reported whole (`file: entry.field: message`) and nothing runs (exit 2).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from radixfleet.config.errors import ConfigError
from radixfleet.twin.load import load_scenario
from radixfleet.twin.report import page, section
from radixfleet.twin.run import Outcome, run_scenario, write_outcome
from radixfleet.twin.scenario import Scenario

EXIT_BAD_SCENARIO = 2
BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
#: --quick: half the duration (faults at half their times), half the traffic.
QUICK_TIME, QUICK_RATE = 0.5, 0.5

twin_app = typer.Typer(
    name="twin",
    help="The fleet twin: replay scenarios in virtual time and compare policies.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err = Console(stderr=True)

WorkersOption = Annotated[
    int, typer.Option(help="Worker processes sharing the regions (default: up to 2 cores).")
]


def default_workers() -> int:
    """Two workers where two cores exist: regions run side by side."""
    return max(1, min(2, os.cpu_count() or 1))


@twin_app.command("run")
def run(
    scenario: Annotated[Path, typer.Option(help="The scenario YAML file.")],
    out: Annotated[Path, typer.Option(help="Directory for results.json, plots, report.")],
    trace: Annotated[
        Path | None, typer.Option(help="A trace file replacing the scenario's trace sources.")
    ] = None,
    workers: WorkersOption = 0,
    oracles: Annotated[bool, typer.Option(help="Compute the hindsight oracles.")] = True,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Replay a scenario under each of its policy sets; write results.json, plots, a report."""
    loaded = _load(scenario)
    if trace is not None and not trace.is_file():
        err.print(f"[red]error[/red] {trace}: no such trace file", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_SCENARIO)
    outcome = run_scenario(
        loaded,
        trace=trace,
        workers=workers or default_workers(),
        oracles=oracles,
        console=console if progress else None,
    )
    path = _write(outcome, out)
    (out / "report.html").write_text(
        page(f"twin: {loaded.name}", [section(outcome.results, _images(out))])
    )
    console.print(f"results in {path}, report in {out / 'report.html'}")


def bench(
    out: Annotated[Path, typer.Option(help="Directory for bench.json and the report.")],
    quick: Annotated[
        bool, typer.Option(help="Half the time, half the traffic: a smoke run.")
    ] = False,
    scenarios: Annotated[Path, typer.Option(help="Folder of the standard scenarios.")] = BENCH_DIR,
    workers: WorkersOption = 0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run the standard scenarios side by side with their baselines; write bench.json + report."""
    files = sorted(scenarios.glob("*.yaml"))
    if not files:
        err.print(f"[red]error[/red] {scenarios}: no scenario files", highlight=False)
        raise typer.Exit(EXIT_BAD_SCENARIO)
    loaded = [_load(path) for path in files]  # every file checked before anything runs
    document: dict[str, Any] = {"quick": quick, "scenarios": {}, "headline": {}}
    sections = []
    for scenario in loaded:
        if quick:
            scenario = quick_variant(scenario)
        outcome = run_scenario(
            scenario,
            workers=workers or default_workers(),
            console=console if progress else None,
        )
        folder = out / scenario.name
        _write(outcome, folder)
        document["scenarios"][scenario.name] = outcome.results
        document["headline"][scenario.name] = headline(outcome.results)
        sections.append(section(outcome.results, _images(folder)))
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    note = "quick run: half duration, half traffic" if quick else ""
    (out / "report.html").write_text(page("radixfleet bench", sections, note))
    console.print(f"bench in {out / 'bench.json'}, report in {out / 'report.html'}")


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """The ratios a reader looks at first: every non-baseline policy against each baseline."""
    out: dict[str, Any] = {}
    for name, entry in results["ratios"].items():
        if name in results["baselines"]:
            continue
        out[name] = {
            key: value
            for key, value in entry.items()
            if key.startswith("vs_") or key.endswith("_vs_oracle")
        }
    return out


def quick_variant(scenario: Scenario) -> Scenario:
    """A shorter, lighter copy: half the duration and fault times, half the rate."""
    faults = [
        fault.model_copy(
            update={"at_s": fault.at_s * QUICK_TIME}
            | (
                {"duration_s": fault.duration_s * QUICK_TIME}
                if hasattr(fault, "duration_s")
                else {}
            )
        )
        for fault in scenario.faults
    ]
    workload = scenario.workload.model_copy(
        update={"rate_scale": scenario.workload.rate_scale * QUICK_RATE}
    )
    return scenario.model_copy(
        update={
            "duration_s": scenario.duration_s * QUICK_TIME,
            "faults": faults,
            "workload": workload,
        }
    )


def _load(path: Path) -> Scenario:
    try:
        return load_scenario(path)
    except ConfigError as exc:
        for problem in exc.problems:
            err.print(f"[red]error[/red] {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_SCENARIO) from None


def _write(outcome: Outcome, out: Path) -> Path:
    path = write_outcome(outcome, out)
    # matplotlib takes a second to import: only commands that draw pay for it.
    from radixfleet.twin.plots import write_plots

    write_plots(outcome, out)
    return path


def _images(folder: Path) -> list[Path]:
    return [folder / "headline.png", folder / "replicas.png", folder / "ttft_p95.png"]
