"""How long `radixfleet render` takes for a large catalog (issue 18: 10,000 models in under 10 s).

Builds a catalog of `--models` copies of the repository catalog's first model (distinct names,
the tenants in turn), then times `radixfleet render --catalog ... --out ...` as a user runs it,
in a fresh process each time (imports included), `--repeats` times into new folders; reports
the median, the files written and their bytes.

Writes benchmarks/results/render_scale.json.

    uv run python benchmarks/render_scale.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
GOAL_S = 10.0


def big_catalog(models: int) -> dict[str, Any]:
    """The repository's catalog with `models` copies of its first model."""
    catalog = yaml.safe_load((REPO / "inferenceservices" / "catalog.yaml").read_text())
    template = catalog["models"][0]
    tenants = [t["name"] for t in catalog["tenants"]]
    for tenant in catalog["tenants"]:
        tenant.get("token_budget", {}).pop("per_model", None)  # names a model not copied
    catalog["models"] = [
        template | {"name": f"model-{i:05d}", "tenants": [tenants[i % len(tenants)]]}
        for i in range(models)
    ]
    return catalog


def time_render(catalog: Path, out: Path) -> float:
    """Seconds for one `radixfleet render` into `out`, a folder that does not exist yet (not
    one just emptied: the file system deletes 20,000 files lazily, at the next writer's cost)."""
    started = time.perf_counter()
    subprocess.run(
        ["uv", "run", "--quiet", "radixfleet", "render", "--catalog", str(catalog),
         "--out", str(out)],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="render-scale-") as folder:
        work = Path(folder)
        catalog = work / "catalog.yaml"
        catalog.write_text(yaml.safe_dump(big_catalog(args.models), sort_keys=False))
        seconds = [time_render(catalog, work / f"out-{i}") for i in range(args.repeats)]
        files = [p for p in (work / "out-0").rglob("*") if p.is_file()]
        written = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
        catalog_bytes = catalog.stat().st_size
    result = {
        "benchmark": "render_scale",
        "settings": {"models": args.models, "repeats": args.repeats},
        "catalog_bytes": catalog_bytes,
        "written": written,
        "seconds": [round(s, 2) for s in seconds],
        "median_s": round(statistics.median(seconds), 2),
        "goal": {"under_s": GOAL_S, "met": statistics.median(seconds) < GOAL_S},
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "render_scale.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
