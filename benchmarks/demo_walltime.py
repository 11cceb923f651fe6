"""Wall time of `radixfleet demo`, as a newcomer runs it: the whole command, end to end.

Runs `radixfleet demo --out DIR` (or `--quick`) as a child process, `--repeat` times, and
reports each run's wall time with the steps the demo timed itself (fleet start, Prometheus,
replay, dashboards, stop; from its summary.json) and the command's start-up before them. The
goal is under two minutes for the default demo; the machine's load average is recorded beside
it, since the demo shares the CPUs with whatever else runs.

Writes `demo_walltime.json`.

    uv run python benchmarks/demo_walltime.py [--quick] [--repeat 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from radixfleet.machine import describe_machine

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
GOAL_S = 120.0
CLI = [sys.executable, "-c", "from radixfleet.cli import app; app()", "demo"]


def one_run(*, quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="radixfleet-demo-") as scratch:
        out = Path(scratch) / "demo"
        command = [*CLI, "--out", str(out), *(["--quick"] if quick else [])]
        load = os.getloadavg()[0]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"radixfleet demo failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        summary = json.loads((out / "summary.json").read_text())
    demo = summary["demo"]
    return {
        "wall_time_s": round(wall, 2),
        "inside_run_demo_s": demo["wall_time_s"],
        "steps_s": demo["steps_s"],
        "requests": summary["overall"]["requests"],
        "failed": summary["overall"]["failed"],
        "load_average_1m_at_start": round(load, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="time `radixfleet demo --quick`")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    runs = [one_run(quick=args.quick) for _ in range(args.repeat)]
    walls = [r["wall_time_s"] for r in runs]
    result = {
        "benchmark": "demo_walltime",
        "command": "radixfleet demo" + (" --quick" if args.quick else ""),
        "goal_s": GOAL_S,
        "median_wall_time_s": round(statistics.median(walls), 2),
        "met_goal": statistics.median(walls) < GOAL_S,
        "runs": runs,
        "machine": describe_machine(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "demo_walltime_quick.json" if args.quick else "demo_walltime.json"
    (args.out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("command", "median_wall_time_s", "met_goal")}))


if __name__ == "__main__":
    main()
