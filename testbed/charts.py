"""The Helm charts the Pulumi program installs, rendered and installed here by Helm itself.

A chart's defaults merge with the values infra passes in ways a reading of the values alone
cannot show (KServe's local model chart deep-merges them into a base manifest, so a default
key survives any override). The test bed's own Helm (built from the Go module proxy,
`testbed.builds.HELM`) takes a chart shipped inside an upstream Go module: `render(chart,
values)` returns the objects a `helm install` would create, and `install` installs it in a
cluster, as the Pulumi program's Helm releases do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.builds import HELM, HERE
from testbed.gobuild import BuildError, cache_root, ensure_built, find_go

Obj = dict[str, Any]


class ChartError(Exception):
    """A chart could not be found or rendered."""


@dataclass(frozen=True)
class ModuleChart:
    """A chart (or a folder of manifests) at ``folder`` inside the Go module that a go.mod of
    ours requires."""

    module: str
    go_mod: Path
    folder: str
    # Text to put in place of a placeholder in the chart's Chart.yaml and values.yaml, for a
    # chart its project fills in when it publishes a release (the Knative operator's
    # hack/generate-helm.sh writes the version there); path() then gives a filled copy.
    fill: tuple[tuple[str, str], ...] = ()

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
        folder = Path(json.loads(done.stdout)["Dir"]) / self.folder
        return self._filled(folder) if self.fill else folder

    def _filled(self, folder: Path) -> Path:
        """A copy of ``folder`` with ``fill`` applied, made once per module version and fill."""
        key = hashlib.sha256(repr((self.module, self.version(), self.fill)).encode()).hexdigest()
        copy = cache_root().parent / "charts" / f"{Path(self.folder).name}-{key[:16]}"
        if copy.is_dir():
            return copy
        copy.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=copy.parent, prefix=".fill-"))
        shutil.copytree(folder, staging, dirs_exist_ok=True)
        for path in (staging, *staging.rglob("*")):  # the module cache's modes are read-only
            path.chmod(0o755 if path.is_dir() else 0o644)
        for name in ("Chart.yaml", "values.yaml"):
            path = staging / name
            text = path.read_text()
            for placeholder, value in self.fill:
                text = text.replace(placeholder, value)
            path.write_text(text)
        with contextlib.suppress(OSError):  # another process filled it first: keep theirs
            staging.rename(copy)
        shutil.rmtree(staging, ignore_errors=True)
        return copy


def kserve_chart(name: str) -> ModuleChart:
    """One of KServe's charts, at the KServe version the test cluster runs."""
    return ModuleChart("github.com/kserve/kserve", HERE / "kserve" / "go.mod", f"charts/{name}")


def cert_manager_crds() -> ModuleChart:
    """cert-manager's CRDs (plain YAML, not a chart), at the version of its chart infra pins."""
    return ModuleChart(
        "github.com/cert-manager/cert-manager", HERE / "cert-manager" / "go.mod", "deploy/crds"
    )


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


def install(
    chart: ModuleChart,
    values: Mapping[str, Any],
    *,
    release: str,
    namespace: str,
    kubeconfig: Path,
    post_renderer: Sequence[str] = (),
) -> None:
    """``helm upgrade --install`` of ``chart`` with ``values`` into the cluster of
    ``kubeconfig``, creating ``namespace``; ``post_renderer`` is a program and its arguments
    that change the rendered objects (Helm's ``--post-renderer``). Returns once Helm has
    created the objects: the caller waits for what it needs (certificates come after)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as given:
        json.dump(values, given)
        given.flush()
        argv = [str(helm()), "upgrade", "--install", release, str(chart.path()),
                "--namespace", namespace, "--create-namespace", "--values", given.name,
                "--kubeconfig", str(kubeconfig)]  # fmt: skip
        if post_renderer:
            argv += ["--post-renderer", post_renderer[0]]
            argv += [f"--post-renderer-args={arg}" for arg in post_renderer[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ChartError(f"helm install {release} ({chart.folder}): {done.stderr.strip()}")


def uninstall(*, release: str, namespace: str, kubeconfig: Path) -> None:
    """``helm uninstall`` of ``release``, waiting for its objects to go; gone already is fine."""
    argv = [str(helm()), "uninstall", release, "--namespace", namespace, "--ignore-not-found",
            "--wait", "--timeout=120s", "--kubeconfig", str(kubeconfig)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ChartError(f"helm uninstall {release}: {done.stderr.strip()}")
