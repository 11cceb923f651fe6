"""Build the test API server (tests/apiserver/main.go) once per source version, and cache it.

The binary lands in ``${XDG_CACHE_HOME:-~/.cache}/radixfleet/apiserver/<hash>/apiserver``, where
the hash covers go.mod, go.sum and main.go, so a second run reuses it and a change to any of them
builds anew. Only the standard library is used, so that ``scripts/provision.sh`` can build before
the project's environment exists: ``python3 tests/apiserver/build.py`` prints the binary's path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("go.mod", "go.sum", "main.go")
MODULE = "k8s.io/apiextensions-apiserver"
KEEP_BUILDS = 3
# Where Debian's golang and the official tarball put go, for shells whose PATH lacks it.
GO_FALLBACKS = (Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))


class BuildError(Exception):
    """The server could not be built: no Go toolchain, or the build failed."""


def source_hash() -> str:
    """Hash of the sources and of how they are built: a change to either means a new binary."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    digest.update(" ".join(_go_build_args()).encode())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "radixfleet" / "apiserver"


def binary_path() -> Path:
    return cache_root() / source_hash() / "apiserver"


def pinned_version() -> str:
    """The apiextensions-apiserver module version go.mod pins, e.g. ``v0.37.2``."""
    match = re.search(
        rf"^\s*{re.escape(MODULE)}\s+(v\S+)", (SOURCE_DIR / "go.mod").read_text(), re.M
    )
    if match is None:
        raise BuildError(f"go.mod does not require {MODULE}")
    return match.group(1)


def kube_version(module_version: str) -> str:
    """Staging modules v0.X.Y ship with Kubernetes v1.X.Y."""
    return "v1." + module_version.removeprefix("v0.")


def find_go() -> Path:
    found = shutil.which("go")
    if found:
        return Path(found)
    for candidate in GO_FALLBACKS:
        if candidate.is_file():
            return candidate
    raise BuildError("no Go toolchain: install Go (CI machines have it at /usr/local/go)")


def ldflags(version: str) -> str:
    # Without these the server reports v0.0.0-master, which kubectl cannot parse; -s -w drop
    # debug symbols, which halves the binary and its link time.
    kube = kube_version(version)
    major, minor = kube.removeprefix("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return f"-s -w -X {pkg}.gitVersion={kube} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise builds of one version across processes (pytest-xdist workers, two shells)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_built(*, log: Path | None = None) -> Path:
    """Return the cached binary, building it first when this source version has none."""
    target = binary_path()
    if target.is_file():
        return target
    with _locked(target.parent):
        if not target.is_file():  # another process may have built it while we waited
            _build(target, log=log)
    return target


def _go_build_args() -> list[str]:
    # -trimpath and no VCS stamp: the binary depends on the sources only, not on where the
    # checkout is or what git says about it.
    return ["build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags(pinned_version())]


def _build(target: Path, *, log: Path | None) -> None:
    # GOFLAGS replaces the machine's own (go env), so it says all we need; no cgo, no C toolchain.
    env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
    # Build to a temporary name and rename, so an interrupted build never looks finished.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".apiserver-")
    os.close(fd)
    command = [str(find_go()), *_go_build_args(), "-o", tmp, "."]
    result = subprocess.run(
        command, cwd=SOURCE_DIR, env=env, capture_output=True, text=True, check=False
    )
    if log is not None:
        log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"go build failed ({result.returncode}):\n{result.stderr[-4000:]}")
    Path(tmp).chmod(0o755)
    Path(tmp).replace(target)
    _prune(keep=KEEP_BUILDS)


def _prune(*, keep: int) -> None:
    """Drop all but the newest few builds (85 MB each); a few, not one, so that checkouts at
    different commits on one machine do not rebuild each other's."""
    builds = sorted(cache_root().glob("*/apiserver"), key=lambda p: p.stat().st_mtime)
    for old in builds[:-keep]:
        shutil.rmtree(old.parent, ignore_errors=True)


def main() -> int:
    try:
        print(ensure_built())
    except BuildError as error:
        print(f"apiserver build: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
