"""The image cache: one folder per image and input hash (``Inputs``), built once under a lock,
old builds pruned; the record of a built image, and the tools every builder runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.oci import (
    Layout,
    archive_digest,
    pack_archive,
)

HERE = Path(__file__).resolve().parents[1]  # testbed/
REPO = HERE.parent
FILES = HERE / "containerfiles"
# Every time stamp inside our images (files, configs, compiled bytecode): 2025-01-01 00:00 UTC.
EPOCH = 1735689600
NONROOT = 65532
PREFIX = "localhost/radixfleet"
ARCHIVE = "image.oci.tar"
KEEP_BUILDS = 2
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's, in the images and on the host
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(Exception):
    """An image could not be built or loaded: which image, which step, and the tool's last words."""


@dataclass(frozen=True)
class ImageRecord:
    """A built image: its archive, its name for containerd, and its manifest digest."""

    name: str
    archive: Path
    reference: str  # localhost/radixfleet/<name>:<hash>, the name the archive carries
    digest: str  # sha256:..., the manifest's digest: pods refer to the image by it
    size: int  # bytes of the archive
    build_seconds: float  # how long the cold build took

    @property
    def pinned(self) -> str:
        """The reference by digest, for Kubernetes manifests."""
        return f"{self.reference.rpartition(':')[0]}@{self.digest}"

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "archive": self.archive.name}

    @classmethod
    def read(cls, folder: Path) -> ImageRecord | None:
        path = folder / "record.json"
        if not path.is_file() or not (folder / ARCHIVE).is_file():
            return None
        data = json.loads(path.read_text())
        return cls(**{**data, "archive": folder / data["archive"]})


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "radixfleet" / "images"


Builder = Callable[[Path, str], Layout]  # (work folder, reference) -> the image's layout


class Inputs:
    """Everything an image is made from, hashed in the order it is added."""

    def __init__(self, name: str) -> None:
        self.sha = hashlib.sha256(name.encode() + b"\0")

    def text(self, label: str, value: str) -> Inputs:
        self.sha.update(f"{label}\0{value}\0".encode())
        return self

    def file(self, path: Path, *, label: str | None = None) -> Inputs:
        self.sha.update(f"{label or path.name}\0".encode() + path.read_bytes() + b"\0")
        return self

    def tree(self, root: Path, files: Iterable[Path]) -> Inputs:
        for path in files:
            self.file(path, label=path.relative_to(root).as_posix())
        return self

    def hexdigest(self) -> str:
        return self.sha.hexdigest()[:16]


def ensure_image(name: str, inputs: Inputs, build: Builder) -> ImageRecord:
    """The cached image for these inputs, built first if this machine has none."""
    source_hash = inputs.hexdigest()
    folder = cache_root() / name / source_hash
    record = ImageRecord.read(folder)
    if record is not None:
        return record
    with _locked(folder.parent):
        record = ImageRecord.read(folder)  # another process may have built it while we waited
        if record is None:
            record = _build_into(name, folder, build, reference=f"{PREFIX}/{name}:{source_hash}")
    prune(folder.parent, keep=KEEP_BUILDS)
    return record


def _build_into(name: str, folder: Path, build: Builder, *, reference: str) -> ImageRecord:
    # Build into a temporary folder and rename it, so an interrupted build never looks finished.
    # We hold the image's lock: any other staging folder is an interrupted build's.
    for stale in folder.parent.glob(".build-*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
    staging.chmod(0o755)
    started = time.monotonic()
    try:
        layout = build(staging / "work", reference)
        pack_archive(layout, staging / ARCHIVE, epoch=EPOCH)
        shutil.rmtree(staging / "work")
        record = ImageRecord(
            name=name,
            archive=folder / ARCHIVE,
            reference=reference,
            digest=archive_digest(staging / ARCHIVE),
            size=(staging / ARCHIVE).stat().st_size,
            build_seconds=round(time.monotonic() - started, 1),
        )
        (staging / "record.json").write_text(json.dumps(record.to_json(), indent=2) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.replace(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise builds of one image across processes (pytest workers, two shells)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prune(folder: Path, *, keep: int) -> None:
    """Keep the newest few builds of an image, so checkouts at other commits keep theirs."""
    builds = sorted(
        (p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in builds[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def run_tool(
    command: Sequence[str],
    *,
    image: str,
    step: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> str:
    """Run a build tool, its output appended to ``log``; :class:`ImageError` if it fails."""
    with tempfile.TemporaryFile("w+") as output:
        try:
            result = subprocess.run(
                list(command),
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
        except FileNotFoundError as error:
            raise ImageError(f"image {image}: {step}: {command[0]} is not installed") from error
        output.seek(0)
        text = output.read()
    if log is not None:
        with log.open("a") as handle:
            handle.write(f"$ {' '.join(command)}\n{text}\n")
    if result.returncode != 0:
        tail = "\n".join(text.splitlines()[-25:])
        raise ImageError(f"image {image}: {step} failed (exit {result.returncode}):\n{tail}")
    return text


@functools.cache
def tool_version(command: tuple[str, ...]) -> str:
    """A tool's version line, for the inputs hash (a new tool may build a different image)."""
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return "missing"
    return (
        (result.stdout or result.stderr).splitlines()[0] if result.stdout or result.stderr else ""
    )
