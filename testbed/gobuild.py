"""Build the test bed's Go programs once per source version, and cache the binaries.

Each :class:`GoBuild` names a folder of this repository holding a Go module of ours (``go.mod``,
``go.sum``, one or more ``main`` packages) that requires an upstream project by exact version:
Kubernetes, KServe, Knative. The binaries land in
``${XDG_CACHE_HOME:-~/.cache}/radixfleet/go/<name>/<hash>/``, where the hash covers every file
of the module folder and the build flags, so a second run reuses them and any change rebuilds.

Only the standard library is used, so that ``scripts/provision.sh`` can build before the
project's environment exists (``python3 -m testbed.build``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KEEP_BUILDS = 2
# Where Debian's golang and the official tarball put go, for shells whose PATH lacks it.
GO_FALLBACKS = (Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))


class BuildError(Exception):
    """A program could not be built: no Go toolchain, or the build failed."""


@dataclass(frozen=True)
class Edit:
    """A text swap in one file of an upstream module, made at build time in a copy of the
    module that the build uses in its place (a ``replace`` in a ``-modfile``).

    ``old`` must occur exactly ``count`` times in ``module``'s ``file``; otherwise the build
    fails rather than build something other than what the edit was written for.
    """

    module: str
    file: str
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Addition:
    """A file of ours (``source``, relative to the module folder) compiled into an upstream
    package as ``module``'s ``file``, in the same copy. With ``from_module``, ``source`` is a
    file of the upstream module itself: what its own ``go generate`` would have copied."""

    module: str
    file: str
    source: str
    from_module: bool = False


@dataclass(frozen=True)
class GoBuild:
    """One Go module folder of ours and the binaries built from it.

    ``mains`` maps each binary's name to its package path (``.`` for the module folder itself,
    or an upstream import path such as ``knative.dev/serving/cmd/queue``).
    """

    name: str
    source_dir: Path
    mains: tuple[tuple[str, str], ...]
    ldflags: str = "-s -w"
    tags: tuple[str, ...] = ()
    edits: tuple[Edit, ...] = ()
    additions: tuple[Addition, ...] = ()

    def source_hash(self) -> str:
        """Hash of the module folder's files and of how they are built."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.source_dir.rglob("*") if p.is_file()):
            if "__pycache__" in path.parts:
                continue
            relative = path.relative_to(self.source_dir).as_posix()
            digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
        built: tuple[object, ...] = (self.mains, self.ldflags, self.tags, _go_args())
        if self.edits or self.additions:  # only then: the other builds keep their hashes
            built += (self.edits, self.additions)
        digest.update(repr(built).encode())
        return digest.hexdigest()[:16]

    def folder(self) -> Path:
        return cache_root() / self.name / self.source_hash()

    def binary(self, main: str) -> Path:
        return self.folder() / main


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "radixfleet" / "go"


def find_go() -> Path:
    found = shutil.which("go")
    if found:
        return Path(found)
    for candidate in GO_FALLBACKS:
        if candidate.is_file():
            return candidate
    raise BuildError("no Go toolchain: install Go (CI machines have it at /usr/local/go)")


def ensure_built(build: GoBuild, *, log: Path | None = None) -> Path:
    """Return the folder of ``build``'s binaries, building them first when this version has none."""
    folder = build.folder()
    if _complete(build, folder):
        return folder
    with _locked(folder.parent):
        if not _complete(build, folder):  # another process may have built it while we waited
            _build(build, folder, log=log)
    return folder


def prefetch(build: GoBuild) -> None:
    """Download the modules ``build`` compiles from, unless it is built already: network and
    unzipping, little compiling, so it overlaps another build's compile. The build itself
    reports anything missing, so a failure here is only printed."""
    if _complete(build, build.folder()):
        return
    command = [str(find_go()), "list", "-e", "-deps", "-f", "{{.ImportPath}}", *_tags(build)]
    packages = [package for _, package in build.mains]
    result = subprocess.run(
        [*command, *packages], cwd=build.source_dir, env=_go_env(), capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        print(f"testbed prefetch: {build.name}: {result.stderr[-1000:]}")


def _complete(build: GoBuild, folder: Path) -> bool:
    return all((folder / main).is_file() for main, _ in build.mains)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise builds of one program across processes (pytest-xdist workers, two shells)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _go_env() -> dict[str, str]:
    # GOFLAGS replaces the machine's own (go env), so it says all we need: resolve modules from
    # go.mod and go.sum as committed, and no cgo (static binaries that run in any image).
    return dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")


def _tags(build: GoBuild) -> list[str]:
    return ["-tags", ",".join(build.tags)] if build.tags else []


def _go_args() -> list[str]:
    # -trimpath and no VCS stamp: the binary depends on the sources only, not on where the
    # checkout is or what git says about it.
    return ["build", "-trimpath", "-buildvcs=false"]


def _build(build: GoBuild, folder: Path, *, log: Path | None) -> None:
    env = _go_env()
    # Build into a temporary folder and rename it, so an interrupted build never looks finished.
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
    started = time.monotonic()
    try:
        modfile = _patched_modfile(build, staging / ".patched", env=env)
        for main, package in build.mains:
            _go_build(build, package, staging / main, env=env, log=log, modfile=modfile)
        shutil.rmtree(staging / ".patched", ignore_errors=True)
        (staging / "build-seconds").write_text(f"{time.monotonic() - started:.0f}\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.replace(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _prune(build.name, keep=KEEP_BUILDS)


def _patched_modfile(build: GoBuild, folder: Path, *, env: dict[str, str]) -> Path | None:
    """A go.mod for ``-modfile`` that replaces each upstream module ``build`` edits with an
    edited copy under ``folder`` (None when it edits nothing). The Go module cache stays as
    downloaded: go refuses overlays of files beneath it."""
    modules = sorted({e.module for e in build.edits} | {a.module for a in build.additions})
    if not modules:
        return None
    copies = {module: _copy_module(build, module, folder, env=env) for module in modules}
    for edit in build.edits:
        _apply(build, edit, copies[edit.module] / edit.file)
    for addition in build.additions:
        copy = copies[addition.module]
        origin = (copy if addition.from_module else build.source_dir) / addition.source
        shutil.copyfile(origin, copy / addition.file)
    modfile = folder / "go.mod"
    replaces = "".join(f"\nreplace {module} => {copy}\n" for module, copy in copies.items())
    modfile.write_text((build.source_dir / "go.mod").read_text() + replaces)
    shutil.copyfile(build.source_dir / "go.sum", folder / "go.sum")
    return modfile


def _copy_module(build: GoBuild, module: str, folder: Path, *, env: dict[str, str]) -> Path:
    copy = folder / module.replace("/", "_")
    # copyfile, not copy2: the module cache's files and folders are read-only.
    shutil.copytree(_module_dir(build, module, env=env), copy, copy_function=shutil.copyfile)
    for path in (copy, *copy.rglob("*")):
        if path.is_dir():
            path.chmod(0o755)
    return copy


def _apply(build: GoBuild, edit: Edit, path: Path) -> None:
    text = path.read_text()
    found = text.count(edit.old)
    if found != edit.count:
        raise BuildError(
            f"{build.name}: {edit.module}/{edit.file} holds the edited text {found} times, "
            f"not {edit.count}: the edit no longer fits this version"
        )
    path.write_text(text.replace(edit.old, edit.new))


def _module_dir(build: GoBuild, module: str, *, env: dict[str, str]) -> Path:
    """Where the Go module cache holds ``module`` at the version ``build``'s go.mod requires,
    downloading it first when it is not there (``go list -m`` would name no folder then)."""
    result = subprocess.run(
        [str(find_go()), "mod", "download", "-json", module],
        cwd=build.source_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        folder = str(json.loads(result.stdout)["Dir"])
    except (ValueError, KeyError):
        folder = ""
    if result.returncode != 0 or not folder:
        failure = (result.stdout + result.stderr)[-2000:]
        raise BuildError(f"{build.name}: go mod download {module} failed:\n{failure}")
    return Path(folder)


def _go_build(
    build: GoBuild,
    package: str,
    out: Path,
    *,
    env: dict[str, str],
    log: Path | None,
    modfile: Path | None = None,
) -> None:
    command = [str(find_go()), *_go_args(), "-ldflags", build.ldflags, "-o", str(out)]
    command += _tags(build)
    if modfile is not None:
        command += ["-modfile", str(modfile)]
    result = subprocess.run(
        [*command, package],
        cwd=build.source_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if log is not None:
        with log.open("a") as handle:
            handle.write(result.stdout + result.stderr)
    if result.returncode != 0:
        raise BuildError(
            f"go build of {build.name}/{out.name} ({package}) failed ({result.returncode}):\n"
            f"{result.stderr[-4000:]}"
        )


def _prune(name: str, *, keep: int) -> None:
    """Drop all but the newest few builds of a program; a few, not one, so that checkouts at
    different commits on one machine do not rebuild each other's."""
    builds = sorted(
        (p for p in (cache_root() / name).iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in builds[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
