"""The `radixfleet` command line: render, validate, and the commands each subsystem adds.

Commands print what a platform engineer needs and exit non-zero on any problem; a bad catalog
exits 2 and writes nothing.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from radixfleet.config import Catalog, ConfigError, load_catalog
from radixfleet.dashboards import dashboard_files
from radixfleet.emulator.cli import emulate
from radixfleet.entry.cli import entry_app
from radixfleet.kit.cli import operator_app
from radixfleet.kit.registry import controller_apps
from radixfleet.platform import KNATIVE_FEATURES
from radixfleet.render.files import write_folders
from radixfleet.render.fleet import RenderedTree, render_tree
from radixfleet.twin.cli import bench, twin_app
from radixfleet.validate import iter_findings

app = typer.Typer(
    name="radixfleet",
    help="Run LLM serving fleets on Kubernetes: KServe + SGLang, cache-aware and scale-to-zero.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err = Console(stderr=True)
# Each registered controller's commands (`radixfleet canary ...`), named by its plug-in.
for _name, _app in controller_apps():
    app.add_typer(_app, name=_name)
app.add_typer(operator_app, name="operator")
app.add_typer(entry_app, name="entry")
app.add_typer(twin_app, name="twin")
app.command("bench")(bench)

DEFAULT_CATALOG = Path("inferenceservices/catalog.yaml")
EXIT_PROBLEMS = 1
EXIT_BAD_CONFIG = 2

CatalogOption = Annotated[
    Path, typer.Option("--catalog", help="The fleet catalog (regions, tenants, models).")
]


@app.command()
def render(
    catalog: CatalogOption = DEFAULT_CATALOG,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write DIR/runtimes, DIR/inferenceservices, DIR/dashboards and "
            "DIR/deploy/{operator,monitoring,entry,crds}, not the repo's."
        ),
    ] = None,
) -> None:
    """Render the SGLang runtimes, the InferenceServices, the operator's base and the CRDs."""
    if out is not None and out.exists() and not out.is_dir():
        err.print(f"[red]error[/red] --out {out}: not a folder", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_CONFIG)
    if out is None and catalog.resolve().parent.name != "inferenceservices":
        # Without --out, render writes the repository's folders beside the catalog's; for a
        # catalog anywhere else that would be whatever folders happen to sit around it.
        err.print(f"[red]error[/red] --catalog {catalog}: outside an inferenceservices/ folder, "
                  "render needs --out DIR", highlight=False, soft_wrap=True)  # fmt: skip
        raise typer.Exit(EXIT_BAD_CONFIG)
    runtimes_dir, isvc_dir = _output_dirs(catalog, out)
    blocked = _not_a_folder(_rendered_folders(runtimes_dir, isvc_dir))
    if blocked is not None:  # found before anything is written, not after half of it
        err.print(f"[red]error[/red] {blocked}: a file where a folder goes", highlight=False,
                  soft_wrap=True)  # fmt: skip
        raise typer.Exit(EXIT_BAD_CONFIG)
    try:
        with _no_cyclic_collection():
            fleet = load_catalog(catalog)
            tree = render_tree(fleet)
    except ConfigError as exc:
        for problem in exc.problems:
            err.print(f"[red]error[/red] {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_CONFIG) from None
    try:
        _write_rendered(fleet, tree, runtimes_dir=runtimes_dir, isvc_dir=isvc_dir)
    except OSError as exc:  # a file where a folder goes, a read-only or full disk
        err.print(f"[red]error[/red] cannot write: {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_CONFIG) from None


@contextlib.contextmanager
def _no_cyclic_collection() -> Iterator[None]:
    """Loading and rendering build millions of objects that form no cycles (a 10,000-model
    catalog); the cyclic collector kept walking them all for nothing, a third of the load time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _rendered_folders(runtimes_dir: Path, isvc_dir: Path) -> list[Path]:
    root = runtimes_dir.parent
    deploy = root / "deploy"
    return [
        runtimes_dir, isvc_dir, root / "dashboards",
        deploy / "operator", deploy / "monitoring", deploy / "entry", deploy / "crds",
    ]  # fmt: skip


def _not_a_folder(folders: list[Path]) -> Path | None:
    """The first path on the way to one of `folders` that exists and is not a folder."""
    for folder in folders:
        for part in (folder, *folder.parents):
            if part.exists():
                if not part.is_dir():
                    return part
                break
    return None


def _write_rendered(
    fleet: Catalog, tree: RenderedTree, *, runtimes_dir: Path, isvc_dir: Path
) -> None:
    """Every rendered folder, all or nothing: runtimes, InferenceServices, dashboards (beside
    runtimes/: DIR/dashboards with --out, else the repo's), and the kustomize bases of the
    operator (its RBAC from the controller registry), of what Prometheus scrapes, and of the
    region entry (its RBAC from what it and its gate read), and the CRDs (each controller's from
    its spec type, kopf's peering)."""
    from radixfleet.render.crds import render_crds
    from radixfleet.render.entry import render_entry
    from radixfleet.render.monitoring import render_monitoring
    from radixfleet.render.operator import render_operator

    deploy = runtimes_dir.parent / "deploy"  # as in _rendered_folders
    written = write_folders({
        runtimes_dir: tree.runtimes,
        isvc_dir: tree.inferenceservices,
        runtimes_dir.parent / "dashboards": dashboard_files(fleet),
        deploy / "operator": render_operator(),
        deploy / "monitoring": render_monitoring(),
        deploy / "entry": render_entry(),
        deploy / "crds": render_crds(),
    })  # fmt: skip
    for folder, paths in written.items():
        console.print(f"rendered {len(paths)} files into {folder}")


def _output_dirs(catalog: Path, out: Path | None) -> tuple[Path, Path]:
    if out is not None:
        return out / "runtimes", out / "inferenceservices"
    # The committed copies: runtimes/ beside the catalog's inferenceservices/ folder.
    isvc_dir = catalog.resolve().parent
    return isvc_dir.parent / "runtimes", isvc_dir


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Manifest files or kustomize folders.")],
    feature: Annotated[
        list[str] | None,
        typer.Option(
            help="A Knative config-features entry NAME=VALUE the cluster runs with (repeatable); "
            "without any, the ones infra switches on (radixfleet/platform.py).",
        ),
    ] = None,
) -> None:
    """Check manifests against the KServe/Knative CRDs, Kubernetes schemas and SGLang's flags,
    and all of them together against KServe's and Knative's admission webhooks."""
    features = _features(feature)
    missing = [p for p in paths if not p.exists()]
    for path in missing:
        err.print(
            f"[red]error[/red] {path}: no such file or folder", highlight=False, soft_wrap=True
        )
    count = len(missing)
    for finding in iter_findings((p for p in paths if p.exists()), features=features):
        console.print(str(finding), highlight=False, soft_wrap=True)
        count += 1
    console.print(f"{count} problem{'s' * (count != 1)}", highlight=False)
    if count:
        raise typer.Exit(EXIT_PROBLEMS)


def _features(entries: list[str] | None) -> Mapping[str, str]:
    if not entries:
        return KNATIVE_FEATURES
    features: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep or value not in ("enabled", "disabled", "allowed"):
            raise typer.BadParameter(
                f"{entry!r}: want NAME=enabled|disabled|allowed", param_hint="--feature"
            )
        features[name] = value
    return features


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Where the demo writes its report.")] = Path("out/demo"),
    duration: Annotated[float, typer.Option(help="Seconds of workload to replay.", min=1)] = 60.0,
    quick: Annotated[
        bool, typer.Option("--quick", help="A 15-second workload: a first look, or a test.")
    ] = False,
    rate: Annotated[float, typer.Option(help="Requests per second over the fleet.", min=0.1)] = 5.0,
    seed: Annotated[int, typer.Option(help="Seed of the session sampling.")] = 0,
    token_scale: Annotated[
        float, typer.Option(help="Scale the traces' prompt and answer lengths.", min=0.01, max=1)
    ] = 0.25,
    prometheus: Annotated[
        bool, typer.Option(help="Scrape the fleet with Debian's Prometheus, if installed.")
    ] = True,
    manifests: Annotated[
        bool, typer.Option(help="Render and validate the catalog's manifests too.")
    ] = True,
    traces: Annotated[
        Path | None, typer.Option(help="Folder of the traces (default: ../shared/traces).")
    ] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Run a two-region local fleet, replay a trace through it, and write a report to OUT.

    Emulated SGLang replicas behind the real SGLang gateway (smg) in us-east-1 and eu-west-1 (where
    llama-3-1-8b starts at zero replicas and wakes on its first request); writes
    OUT/summary.json, OUT/report.html, OUT/dashboards.html (with Prometheus) and OUT/rendered/.
    The same replay through a deployed radixfleet on a one-node Kubernetes is the repository's
    `make demo-cluster` (testbed/demo.py).
    """
    # Imported here: the fleet pulls in aiohttp, matplotlib and the workload readers.
    from radixfleet.demo.run import QUICK_DURATION_S, DemoOptions, run_demo
    from radixfleet.localfleet import LocalFleetError
    from radixfleet.localfleet.workloads import default_traces_dir

    options = DemoOptions(
        out=out,
        duration_s=QUICK_DURATION_S if quick else duration,
        rate=rate,
        token_scale=token_scale,
        seed=seed,
        prometheus=prometheus,
        manifests=manifests,
        catalog=catalog,
        traces_dir=traces or default_traces_dir(),
    )
    try:
        summary = run_demo(options, console=console)
    except LocalFleetError as exc:
        err.print(f"[red]error[/red] the fleet did not start: {exc}", highlight=False)
        raise typer.Exit(EXIT_PROBLEMS) from None
    failed = summary["overall"]["failed"]
    if failed:
        err.print(f"[red]error[/red] {failed} requests failed", highlight=False)
        for request in summary.get("failed_requests", [])[:5]:
            err.print(f"  {request['region']}/{request['model']}: {request['error']}",
                      highlight=False, markup=False)  # fmt: skip
        raise typer.Exit(EXIT_PROBLEMS)


app.command("emulate")(emulate)


def main() -> None:
    """Entry point of the `radixfleet` script."""
    app()
