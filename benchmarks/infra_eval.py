"""How the Pulumi program's evaluation grows with the number of regions.

Runs the whole program (`infra.program.main`) under `pulumi.runtime.Mocks` for fleets of 1, 3
and 6 regions, each region with the same GPU pools and every catalog model, so that the only
thing that changes is the region count. Reports wall time, resources declared and time per
resource, writes `infra_eval.json` and `infra_eval.png`.

    uv run python benchmarks/infra_eval.py [--regions 1 3 6] [--repeats 3] [--out DIR]

One warm-up run comes first: the first evaluation in a process pays for importing the AWS
SDK's modules (seconds), which is not a cost of the program's size.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import yaml

from infra.testing import INFRA_DIR, example_config, run_program

REGION_NAMES = [
    "us-east-1",
    "eu-west-1",
    "ap-northeast-1",
    "us-west-2",
    "eu-central-1",
    "ap-southeast-2",
]
CATALOG = INFRA_DIR.parent / "inferenceservices" / "catalog.yaml"
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def fleet_catalog(regions: list[str]) -> dict[str, Any]:
    """The repository catalog with `regions`, each holding us-east-1's pools and every model."""
    catalog: dict[str, Any] = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
    pools = catalog["regions"][0]["gpu_pools"]
    catalog["regions"] = [{"name": r, "gpu_pools": copy.deepcopy(pools)} for r in regions]
    for model in catalog["models"]:
        model["regions"] = list(regions)
    return catalog


def stack_config(regions: list[str], catalog_path: Path) -> dict[str, Any]:
    config = example_config()
    config.pop("radixfleet:regions")
    config["radixfleet:catalog"] = str(catalog_path)
    config["radixfleet:reservedPools"] = []
    config["radixfleet:network"] = {
        "vpcCidrs": {r: f"10.{10 * (i + 1)}.0.0/16" for i, r in enumerate(regions)}
    }
    config["radixfleet:dns"] = {**config["radixfleet:dns"], "weights": {}}
    config["radixfleet:modelStore"] = {
        **config["radixfleet:modelStore"],
        "primaryRegion": regions[0],
    }
    return config


def measure(count: int, repeats: int, workdir: Path) -> dict[str, Any]:
    regions = REGION_NAMES[:count]
    path = workdir / f"catalog-{count}.yaml"
    path.write_text(yaml.safe_dump(fleet_catalog(regions)), encoding="utf-8")
    config = stack_config(regions, path)
    walls, cpus, resources = [], [], 0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        mocks = run_program(config, stack=f"bench-{count}")
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        resources = len(mocks.resources)
    wall_s = statistics.median(walls)
    return {
        "regions": count,
        "resources": resources,
        "wall_s": round(wall_s, 3),
        "cpu_s": round(statistics.median(cpus), 3),
        "wall_runs_s": [round(w, 3) for w in walls],
        "ms_per_resource": round(1000 * wall_s / resources, 3),
    }


def linear_fit(points: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares `wall_s = fixed_s + per_region_s * regions`."""
    xs = [p["regions"] for p in points]
    ys = [p["wall_s"] for p in points]
    if len(set(xs)) < 2:
        return {"fixed_s": ys[0], "per_region_s": 0.0}
    slope, intercept = statistics.linear_regression(xs, ys)
    return {"fixed_s": round(intercept, 3), "per_region_s": round(slope, 3)}


def plot(points: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3.5))
    axes = figure.subplots()
    xs = [p["regions"] for p in points]
    axes.plot(xs, [p["wall_s"] for p in points], marker="o", label="wall time (median)")
    axes.set_xlabel("regions")
    axes.set_ylabel("seconds under mocks")
    axes.set_xticks(xs)
    twin = axes.twinx()
    twin.plot(xs, [p["resources"] for p in points], "s--", color="grey", label="resources")
    twin.set_ylabel("resources declared")
    axes.set_title("Pulumi program evaluation vs. region count")
    figure.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88))
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    # The AWS SDK warns about its own deprecated aliases when its modules load.
    warnings.simplefilter("ignore", DeprecationWarning)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        warm = time.perf_counter()
        measure(1, 1, workdir)
        warm_up_s = time.perf_counter() - warm
        points = [measure(n, args.repeats, workdir) for n in args.regions]
    base = points[0]
    for p in points:
        p["wall_vs_first"] = round(p["wall_s"] / base["wall_s"], 2)
        p["resources_vs_first"] = round(p["resources"] / base["resources"], 2)
    result = {
        "benchmark": "infra_eval",
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "first_run_in_process_s": round(warm_up_s, 3),
        "points": points,
        "fit": linear_fit(points),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "infra_eval.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(points, args.out / "infra_eval.png")
    _report(result)


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _report(result: dict[str, Any]) -> None:
    print(f"first run in a fresh process (imports included): {result['first_run_in_process_s']} s")
    print("regions  resources  wall_s  cpu_s  ms/resource  wall_vs_1  resources_vs_1")
    for p in result["points"]:
        print(
            f"{p['regions']:>7}  {p['resources']:>9}  {p['wall_s']:>6}  {p['cpu_s']:>5}  "
            f"{p['ms_per_resource']:>11}  {p['wall_vs_first']:>9}  {p['resources_vs_first']:>14}"
        )
    fit = result["fit"]
    print(f"fit: wall_s = {fit['fixed_s']} + {fit['per_region_s']} x regions")


if __name__ == "__main__":
    main()
