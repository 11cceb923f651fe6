"""The Helm charts the Pulumi program installs, rendered here by Helm itself.

A chart's defaults merge with the values infra passes in ways a reading of the values alone
cannot show (KServe's local model chart deep-merges them into a base manifest, so a default
key survives any override). `render(chart, values)` runs the test bed's own Helm (built from the
Go module proxy, `testbed.builds.HELM`) over a chart shipped inside an upstream Go module, and
returns the objects a `helm install` would create.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.builds import HELM, HERE
from testbed.gobuild import BuildError, ensure_built, find_go

Obj = dict[str, Any]


class ChartError(Exception):
    """A chart could not be found or rendered."""


@dataclass(frozen=True)
class ModuleChart:
    """A chart at ``folder`` inside the Go module that a go.mod of ours requires."""

    module: str
    go_mod: Path
    folder: str

    def version(self) -> str:
        """The module's version, as our go.mod requires it (one place for it)."""
        for line in self.go_mod.read_text().splitlines():
            words = line.split()
            if words[:2] == ["require", self.module] and len(words) >= 3:
                return words[2]
        raise ChartError(f"{self.go_mod} does not require {self.module}")

    def path(self) -> Path:
        """The chart's folder in the Go module cache, downloaded first when missing."""
        spec = f"{self.module}@{self.version()}"
        done = subprocess.run(
            [str(find_go()), "mod", "download", "-json", spec],
            cwd=self.go_mod.parent, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise ChartError(f"go mod download {spec}: {done.stderr.strip() or done.stdout}")
        return Path(json.loads(done.stdout)["Dir"]) / self.folder


def kserve_chart(name: str) -> ModuleChart:
    """One of KServe's charts, at the KServe version the test cluster runs."""
    return ModuleChart("github.com/kserve/kserve", HERE / "kserve" / "go.mod", f"charts/{name}")


def helm() -> Path:
    """The test bed's Helm, built first when missing."""
    try:
        return ensure_built(HELM) / "helm"
    except BuildError as error:
        raise ChartError(str(error)) from error


def render(
    chart: ModuleChart,
    values: Mapping[str, Any],
    *,
    release: str,
    namespace: str,
    kube_version: str,
) -> list[Obj]:
    """``helm template`` of ``chart`` with ``values``, for a cluster of ``kube_version``
    (``1.35``): every object the release would create."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as given:
        json.dump(values, given)
        given.flush()
        argv = [str(helm()), "template", release, str(chart.path()), "--namespace", namespace,
                "--values", given.name, "--kube-version", kube_version]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ChartError(f"helm template {chart.folder}: {done.stderr.strip()}")
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]
