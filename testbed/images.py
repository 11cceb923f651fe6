"""The test bed's container images, built on this machine with no registry, cached by their inputs.

No container registry can be reached here, so every image the cluster runs is built locally:

- ``base``: Debian bookworm from ``mmdebstrap`` (minbase, ca-certificates, tzdata, user 65532),
  from the Debian mirror this machine's apt uses; ``python``: the same plus Debian's python3.
- ``pause``: the kubelet's sandbox image, our own static C program (``containerfiles/pause.c``).
- ``radixfleet``: the repository's ``Containerfile`` (operator, region entry, emulated replica),
  built by ``buildah`` FROM the ``python`` base by digest.
- ``smg``: the SGLang gateway from its wheel, pinned with hashes.
- :func:`go_binary_image`: any static Go binary (from ``testbed.gobuild``) on the base.

Each image is an ``oci-archive`` under ``${XDG_CACHE_HOME:-~/.cache}/radixfleet/images/<name>/
<hash>/``, where the hash covers every input (sources, lock, package lists, binaries, tools'
versions, the base's digest), so a second run is a no-op. The mmdebstrap images, pause and the
Go images are written by :mod:`testbed.oci` with fixed times and sorted tars: the same inputs
give the same manifest digest. :func:`load_into_containerd` imports an archive into a containerd.

Only the standard library is used, so that ``scripts/provision.sh`` can build the images before
the project's environment exists: ``python3 -m testbed.images [NAME...]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.oci import (
    FORMAT,
    Blob,
    ImageConfig,
    Layout,
    add_files,
    archive_digest,
    copy_tar,
    pack_archive,
    reuse_layers,
    unpack_archive,
    write_image,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FILES = HERE / "containerfiles"
# Every time stamp inside our images (files, configs, compiled bytecode): 2025-01-01 00:00 UTC.
EPOCH = 1735689600
SUITE = "bookworm"
NONROOT = 65532
PREFIX = "localhost/radixfleet"
ARCHIVE = "image.oci.tar"
KEEP_BUILDS = 2
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's, in the images and on the host
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the radixfleet image's build context holds: the project, its metadata and its lock.
PROJECT_FILES = ("pyproject.toml", "uv.lock", "README.md")
PROJECT_PACKAGES = ("radixfleet",)
BASE_PACKAGES = ("ca-certificates", "tzdata")
PYTHON_PACKAGES = (*BASE_PACKAGES, "python3", "python3-venv")
# Documentation, manuals and translations are dropped from the Debian images (copyrights kept).
DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# Left out of the Debian layer: device nodes (the runtime makes /dev), files copied from the
# build host (resolv.conf, hostname), and logs, apt lists and caches that differ per run.
DROP_UNDER = ("dev/", "var/log/", "var/lib/apt/lists/", "var/cache/apt/")
KEEP_FOLDERS = ("var/",)  # their folders stay, empty, where packages expect them
DROP_FILES = ("etc/hostname", "etc/resolv.conf", "etc/machine-id", "var/cache/ldconfig/aux-cache")
NONROOT_HOOK = (
    f"echo 'nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/usr/sbin/nologin'"
    ' >> "$1/etc/passwd" && '
    f"echo 'nonroot:x:{NONROOT}:' >> \"$1/etc/group\" && "
    "echo 'nonroot:!:20089::::::' >> \"$1/etc/shadow\" && "
    f'install -d -m 0700 -o {NONROOT} -g {NONROOT} "$1/home/nonroot"'
)


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


# --- the cache: one folder per image and input hash ------------------------------------------

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
    _prune(folder.parent, keep=KEEP_BUILDS)
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


def _prune(folder: Path, *, keep: int) -> None:
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


# --- Debian: the mirror apt uses here, and root file systems from mmdebstrap ------------------


def debian_sources(apt_dir: Path = Path("/etc/apt")) -> list[str]:
    """The ``deb URI SUITE main`` lines of this machine's apt for bookworm and its updates.

    Read from ``sources.list``, ``sources.list.d/*.list`` (one-line) and ``*.sources`` (deb822),
    the files apt itself reads, so the images come from the mirror this machine already trusts.
    """
    entries: list[tuple[str, str]] = []
    one_line = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if path.is_file():
            entries += _one_line_entries(path.read_text())
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        entries += _deb822_entries(path.read_text())
    suites = {SUITE, f"{SUITE}-updates", f"{SUITE}-security"}
    lines = [f"deb {uri} {suite} main" for uri, suite in entries if suite in suites]
    if not lines:
        raise ImageError(f"image base: no Debian {SUITE} source with 'main' in {apt_dir}")
    return list(dict.fromkeys(lines))


def _one_line_entries(text: str) -> list[tuple[str, str]]:
    entries = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 4 and words[0] == "deb" and "main" in words[3:]:
            entries.append((words[1], words[2]))
    return entries


def _deb822_entries(text: str) -> list[tuple[str, str]]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line.startswith(("#", " ", "\t")) and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        if "main" in fields.get("components", "").split():
            for uri in fields.get("uris", "").split():
                entries += [(uri, suite) for suite in fields.get("suites", "").split()]
    return entries


def _keep_in_rootfs(info: tarfile.TarInfo) -> bool:
    """Leave out what a container runtime provides and what differs per run or per host."""
    name = info.name.removeprefix("./").rstrip("/")
    if name.startswith(DROP_UNDER):
        return info.isdir() and name.startswith(KEEP_FOLDERS)
    return name not in DROP_FILES


def _mmdebstrap(name: str, packages: Sequence[str], out: Path, *, log: Path) -> None:
    command = [
        "mmdebstrap",
        "--variant=minbase",
        "--format=tar",
        "--quiet",
        f"--include={','.join(packages)}",
        *(f"--dpkgopt={option}" for option in DPKG_OPTIONS),
        f"--customize-hook={NONROOT_HOOK}",
        SUITE,
        str(out),
        *debian_sources(),
    ]
    run_tool(command, image=name, step="mmdebstrap", env={"SOURCE_DATE_EPOCH": str(EPOCH)}, log=log)


def _debian_packages(rootfs_tar: Path) -> list[str]:
    """``name version`` of every installed package, read from dpkg's status file (for the SBOM)."""
    with tarfile.open(rootfs_tar) as tar:
        status = tar.extractfile("./var/lib/dpkg/status")
        text = status.read().decode() if status else ""
    packages = []
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        if fields.get("Status", "").endswith(" installed"):
            packages.append(f"{fields['Package']} {fields['Version']}")
    return sorted(packages)


def _debian_inputs(name: str, packages: Sequence[str]) -> Inputs:
    inputs = Inputs(name)
    for label, value in (
        ("packages", " ".join(packages)),
        ("sources", "\n".join(debian_sources())),
        ("dpkg", " ".join(DPKG_OPTIONS)),
        ("dropped", repr((DROP_UNDER, KEEP_FOLDERS, DROP_FILES))),
        ("hook", NONROOT_HOOK),
        ("epoch", str(EPOCH)),
        ("mmdebstrap", tool_version(("mmdebstrap", "--version"))),
        ("format", FORMAT),
    ):
        inputs.text(label, value)
    return inputs


def _debian_image(name: str, packages: Sequence[str]) -> ImageRecord:
    inputs = _debian_inputs(name, packages)

    def build(work: Path, reference: str) -> Layout:
        work.mkdir(parents=True)
        rootfs = work / "rootfs.tar"
        _mmdebstrap(name, packages, rootfs, log=work.parent / "build.log")
        (work.parent / "debian-packages.txt").write_text("\n".join(_debian_packages(rootfs)) + "\n")
        layout = Layout(work / "layout").create()
        layer = layout.add_layer(
            lambda tar: copy_tar(rootfs, tar, epoch=EPOCH, keep=_keep_in_rootfs)
        )
        rootfs.unlink()
        config = ImageConfig(env=[PATH_ENV, "LANG=C.UTF-8"], cmd=["/bin/bash"])
        history = [f"mmdebstrap --variant=minbase {SUITE} --include={','.join(packages)}"]
        write_image(
            layout,
            layers=[layer],
            config=config,
            epoch=EPOCH,
            history=history,
            reference=reference,
        )
        return layout

    return ensure_image(name, inputs, build)


def base() -> ImageRecord:
    """Debian bookworm minbase with ca-certificates, tzdata and the user nonroot (65532)."""
    return _debian_image("base", BASE_PACKAGES)


def python_base() -> ImageRecord:
    """The base plus Debian's python3 (3.11) and venv: what the Python images build FROM."""
    return _debian_image("python", PYTHON_PACKAGES)


# --- pause and static Go binaries: one layer on scratch or on the base ------------------------

PAUSE_CFLAGS = ("-Os", "-static", "-s", "-Wall", "-Wextra", "-Werror", "-Wl,--build-id=none")


def pause() -> ImageRecord:
    """The kubelet's sandbox image: ``/pause`` alone, static, as uid 65535 like upstream's."""
    source = FILES / "pause.c"
    inputs = Inputs("pause").file(source).text("cflags", " ".join(PAUSE_CFLAGS))
    inputs.text("gcc", tool_version(("gcc", "--version"))).text("format", FORMAT)

    def build(work: Path, reference: str) -> Layout:
        work.mkdir(parents=True)
        binary = work / "pause"
        command = ["gcc", *PAUSE_CFLAGS, "-o", str(binary), str(source)]
        run_tool(command, image="pause", step="gcc", log=work.parent / "build.log")
        files = {"pause": (binary.read_bytes(), 0o755)}
        layout = Layout(work / "layout").create()
        layer = layout.add_layer(lambda tar: add_files(tar, files, epoch=EPOCH))
        config = ImageConfig(entrypoint=["/pause"], user="65535:65535")
        write_image(
            layout,
            layers=[layer],
            config=config,
            epoch=EPOCH,
            history=[f"gcc {' '.join(PAUSE_CFLAGS)} pause.c"],
            reference=reference,
        )
        return layout

    return ensure_image("pause", inputs, build)


def go_binary_image(
    name: str,
    binary: Path,
    *,
    entrypoint: Sequence[str],
    args: Sequence[str] = (),
    env: Sequence[str] = (),
    path: str | None = None,
    data: tuple[str, Path] | None = None,
) -> ImageRecord:
    """A static binary at ``path`` (default ``/usr/local/bin/<binary name>``) on the base image,
    run as 65532; upstream manifests that name their binary (KServe's ``/manager``) set ``path``.

    ``entrypoint`` is the container's command (usually ``[/usr/local/bin/<binary name>]``). The
    base gives the binary CA certificates, time zones and a passwd entry for its user. ``data``
    is ``(folder in the image, folder here)``: files the program reads, copied read-only (ko's
    ``kodata``, which ko images carry at ``/var/run/ko``).
    """
    under = base()
    target = (path or f"/usr/local/bin/{binary.name}").lstrip("/")
    inputs = Inputs(name).text("base", under.digest).file(binary, label=target)
    inputs.text("entrypoint", json.dumps([list(entrypoint), list(args), list(env)]))
    inputs.text("format", FORMAT)
    data_files = _data_files(data)
    for data_target, source in data_files.items():
        inputs.file(source, label=data_target)

    def build(work: Path, reference: str) -> Layout:
        source = unpack_archive(under.archive, work / "base")
        layout = Layout(work / "layout").create()
        layers, history = reuse_layers(source, layout)
        files = {target: (binary.read_bytes(), 0o755)}
        files |= {at: (file.read_bytes(), 0o444) for at, file in data_files.items()}
        layers.append(layout.add_layer(lambda tar: add_files(tar, files, epoch=EPOCH)))
        config = ImageConfig(
            entrypoint=list(entrypoint),
            cmd=list(args),
            env=[PATH_ENV, *env],
            user=f"{NONROOT}:{NONROOT}",
        )
        copied = [target, *([data[0]] if data else [])]
        steps = [str(step.get("created_by", "")) for step in history] + [f"COPY {' '.join(copied)}"]
        write_image(
            layout, layers=layers, config=config, epoch=EPOCH, history=steps, reference=reference
        )
        shutil.rmtree(work / "base")
        return layout

    return ensure_image(name, inputs, build)


def _data_files(data: tuple[str, Path] | None) -> dict[str, Path]:
    """``{path in the image: file here}`` for every file under ``data``'s folder, sorted."""
    if data is None:
        return {}
    at, folder = data
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {f"{at.strip('/')}/{p.relative_to(folder).as_posix()}": p for p in files}


# --- Containerfiles built by buildah, FROM our python base by digest --------------------------


def _project_files() -> list[Path]:
    files = [REPO / name for name in PROJECT_FILES]
    for package in PROJECT_PACKAGES:
        files += sorted(
            p
            for p in (REPO / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
    return files


def radixfleet() -> ImageRecord:
    """radixfleet's one image (operator, region entry, emulated replica) from ``Containerfile``."""
    files = _project_files()
    return _buildah_image(
        "radixfleet", containerfile=REPO / "Containerfile", context_root=REPO, files=files
    )


def smg() -> ImageRecord:
    """The SGLang gateway image: ``smg`` 1.13.0 with its hash-pinned dependencies."""
    return _buildah_image(
        "smg",
        containerfile=FILES / "smg.Containerfile",
        context_root=FILES,
        files=[FILES / "smg-requirements.txt"],
    )


def storage_initializer() -> ImageRecord:
    """KServe's storage-initializer (kserve-storage 0.20.0 and upstream's entrypoint script),
    what KServe runs to download weights: its local model cache's download jobs here."""
    return _buildah_image(
        "kserve-storage-initializer",
        containerfile=FILES / "storage-initializer.Containerfile",
        context_root=FILES,
        files=[FILES / "storage-initializer-requirements.txt",
               FILES / "storage-initializer-entrypoint"],
    )  # fmt: skip


def _buildah_image(
    name: str, *, containerfile: Path, context_root: Path, files: list[Path]
) -> ImageRecord:
    under = python_base()
    inputs = Inputs(name).text("base", under.digest).file(containerfile, label="Containerfile")
    inputs.tree(context_root, files).text("buildah", tool_version(("buildah", "--version")))
    inputs.text("format", FORMAT)

    def build(work: Path, reference: str) -> Layout:
        context = work / "context"
        for path in files:
            copy = context / path.relative_to(context_root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
        return _buildah(name, under, containerfile, context, work=work, reference=reference)

    return ensure_image(name, inputs, build)


def _buildah(
    name: str,
    under: ImageRecord,
    containerfile: Path,
    context: Path,
    *,
    work: Path,
    reference: str,
) -> Layout:
    """Build in a throwaway store (vfs: no mounts to leave behind) and export an OCI layout."""
    store = work / "store"
    storage = [
        "--root",
        str(store / "root"),
        "--runroot",
        str(store / "run"),
        "--storage-driver",
        "vfs",
    ]
    log = work.parent / "build.log"
    base_name = under.reference.rpartition(":")[0]
    run_tool(
        [
            "skopeo",
            "copy",
            "--quiet",
            f"oci-archive:{under.archive}",
            f"containers-storage:[vfs@{store / 'root'}+{store / 'run'}]{under.reference}",
        ],
        image=name,
        step="load the base into buildah's store",
        log=log,
    )
    run_tool(
        [
            "buildah",
            *storage,
            "bud",
            "--isolation",
            "chroot",
            "--pull=never",
            "--layers=false",
            f"--timestamp={EPOCH}",
            *_trust_host_cas(),
            "--identity-label=false",
            "--format",
            "oci",
            "--build-arg",
            f"BASE_IMAGE={base_name}@{under.digest}",
            "-f",
            str(containerfile),
            "-t",
            reference,
            str(context),
        ],
        image=name,
        step="buildah bud",
        log=log,
    )
    run_tool(
        ["buildah", *storage, "push", "--quiet", reference, f"oci:{work / 'layout'}"],
        image=name,
        step="buildah push",
        log=log,
    )
    shutil.rmtree(store, ignore_errors=True)
    layout = Layout(work / "layout")
    _rename(layout, reference=reference)
    return layout


def _trust_host_cas() -> list[str]:
    """Mount this machine's CA bundle over the image's for the RUN steps only (not committed).

    Builds fetch wheels over TLS; where the machine reaches the package index through a proxy
    that re-signs TLS, only the machine's own bundle (``$SSL_CERT_FILE``) verifies it.
    """
    host = Path(os.environ.get("SSL_CERT_FILE") or CA_BUNDLE)
    return ["--volume", f"{host}:{CA_BUNDLE}:ro"] if host.is_file() else []


def _rename(layout: Layout, *, reference: str) -> None:
    """Give buildah's layout the same index annotations as ours (the name containerd uses)."""
    descriptor = layout.manifest_descriptor()
    blob = Blob(descriptor["digest"], descriptor["size"], descriptor["mediaType"])
    layout.write_index(blob, reference=reference)


# --- containerd ---------------------------------------------------------------------------


def load_into_containerd(
    record: ImageRecord,
    *,
    address: str,
    namespace: str = "k8s.io",
    snapshotter: str | None = None,
) -> None:
    """Import ``record``'s archive into the containerd at ``address`` and check it is listed.

    The archive's index names the image (``io.containerd.image.name``), so it lands under
    ``record.reference`` and ``record.pinned``, both with ``record.digest`` as their target.
    """
    ctr = ["ctr", "--address", address, "--namespace", namespace]
    # --digests with --base-name adds the image by digest too (``record.pinned``), the name a
    # manifest that pins the digest asks the CRI for.
    repository = record.reference.rpartition(":")[0]
    command = [*ctr, "images", "import", "--base-name", repository, "--digests"]
    if snapshotter:
        command += ["--snapshotter", snapshotter]
    run_tool([*command, str(record.archive)], image=record.name, step="ctr images import")
    listed = run_tool([*ctr, "images", "ls"], image=record.name, step="ctr images ls")
    names = {words[0] for words in map(str.split, listed.splitlines()) if record.digest in words}
    if not {record.reference, record.pinned} <= names:
        raise ImageError(
            f"image {record.name}: {record.reference} and {record.pinned} are not both in "
            f"containerd's list after import:\n{listed[-2000:]}"
        )


# --- the command ----------------------------------------------------------------------------

IMAGES: dict[str, Callable[[], ImageRecord]] = {
    "base": base,
    "python": python_base,
    "pause": pause,
    "smg": smg,
    "radixfleet": radixfleet,
    "storage-initializer": storage_initializer,
}


def main(argv: list[str]) -> int:
    """Build the named images (all by default) that are missing, and print each one."""
    unknown = [name for name in argv if name not in IMAGES]
    if unknown:
        print(f"testbed images: unknown {unknown}; known: {', '.join(IMAGES)}", file=sys.stderr)
        return 2
    for name in argv or list(IMAGES):
        started = time.monotonic()
        try:
            record = IMAGES[name]()
        except ImageError as error:
            print(f"testbed images: {error}", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - started
        print(
            f"testbed images: {name:<10} {record.pinned} {record.size / 2**20:7.1f} MiB "
            f"(this run {elapsed:.1f} s, cold build {record.build_seconds:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
