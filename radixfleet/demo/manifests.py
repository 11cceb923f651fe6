"""The demo's manifest step: render the catalog, validate the result, build it with kustomize.

What `radixfleet render` and `radixfleet validate` do, quietly, into a folder of the demo's
output, so the report can say which manifests a cluster would get for the fleet it just ran.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from radixfleet.config import ConfigError, load_catalog
from radixfleet.dashboards import render_dashboards
from radixfleet.render.fleet import render_tree, write_tree
from radixfleet.validate import validate_paths


@dataclass
class ManifestCheck:
    """What the step did: files written, problems found, and kustomize's verdict."""

    out_dir: Path
    files: int = 0
    problems: list[str] = field(default_factory=list)
    kustomize: str = "not run"

    @property
    def ok(self) -> bool:
        return not self.problems


def render_and_check(catalog: Path, out_dir: Path) -> ManifestCheck:
    """Render `catalog` into `out_dir`, validate it and run `kubectl kustomize` on it."""
    check = ManifestCheck(out_dir=out_dir)
    try:
        fleet = load_catalog(catalog)
    except ConfigError as err:
        check.problems = [str(problem) for problem in err.problems]
        return check
    except OSError as err:
        check.problems = [f"{catalog}: cannot read the catalog: {err.strerror}"]
        return check
    shutil.rmtree(out_dir, ignore_errors=True)
    tree = render_tree(fleet)
    folders = (out_dir / "runtimes", out_dir / "inferenceservices")
    written = write_tree(tree, runtimes_dir=folders[0], inferenceservices_dir=folders[1])
    boards = render_dashboards(out_dir / "dashboards", catalog=fleet)
    check.files = len(written) + len(boards)
    check.problems = [str(finding) for finding in validate_paths(folders)]
    check.kustomize = _kustomize(folders)
    return check


def _kustomize(folders: tuple[Path, ...]) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return "kubectl not found: skipped"
    for folder in folders:
        done = subprocess.run(
            [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            return f"failed on {folder.name}: {done.stderr.strip()[:300]}"
    return "ok"
