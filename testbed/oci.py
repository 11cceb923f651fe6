"""OCI image layouts and archives, written byte for byte the same on every run (stdlib only).

An image here is a list of layers (gzip'd tars) plus a config and a manifest, stored in an OCI
image layout (``oci-layout``, ``index.json``, ``blobs/sha256/``) and shipped as an
``oci-archive``: a tar of that layout. Every timestamp is a fixed epoch, every tar is sorted and
owned by numeric ids, and gzip carries no name or time, so the same inputs give the same
manifest digest; the cluster's manifests can then refer to an image by digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

# Part of every image's inputs hash: bump it when a change here changes the bytes written.
FORMAT = "radixfleet-oci-1"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
NAME_ANNOTATION = "io.containerd.image.name"  # what `ctr images import` names the image
REF_ANNOTATION = "org.opencontainers.image.ref.name"
# Level 6, as containers/image uses: level 9 costs twice the time for a few percent.
GZIP_LEVEL = 6


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob of a layout: its digest, size and media type."""

    digest: str
    size: int
    media_type: str

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layer:
    """A gzip'd layer blob and the digest of its uncompressed tar (the config's diff_id)."""

    blob: Blob
    diff_id: str


@dataclass
class ImageConfig:
    """The runtime part of an image config: what a container of the image runs, and as whom."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    user: str = ""
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"Env": self.env, "WorkingDir": self.workdir}
        if self.entrypoint:
            body["Entrypoint"] = self.entrypoint
        if self.cmd:
            body["Cmd"] = self.cmd
        if self.user:
            body["User"] = self.user
        if self.labels:
            body["Labels"] = dict(sorted(self.labels.items()))
        return body


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def iso_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Layout:
    """An OCI image layout folder being written or read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"

    def create(self) -> Layout:
        self.blobs.mkdir(parents=True, exist_ok=True)
        (self.root / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
        return self

    def blob_path(self, digest: str) -> Path:
        return self.blobs / digest.removeprefix("sha256:")

    def add_bytes(self, data: bytes, media_type: str) -> Blob:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blob_path(digest).write_bytes(data)
        return Blob(digest, len(data), media_type)

    def add_layer(self, write_tar: Callable[[tarfile.TarFile], None]) -> Layer:
        """A gzip'd layer whose tar ``write_tar`` fills; hashed as it streams to disk."""
        staging = self.blobs / ".layer.partial"
        with staging.open("wb") as raw:
            compressed = _HashingWriter(raw)
            with gzip.GzipFile(
                filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=GZIP_LEVEL
            ) as zipped:
                plain = _HashingWriter(zipped)
                with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    write_tar(tar)
        digest = "sha256:" + compressed.sha.hexdigest()
        staging.replace(self.blob_path(digest))
        return Layer(Blob(digest, compressed.size, LAYER_TYPE), "sha256:" + plain.sha.hexdigest())

    def read_json(self, digest: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.blob_path(digest).read_bytes())
        return value

    def manifest_descriptor(self) -> dict[str, Any]:
        """The one manifest the layout's index lists (a layout holds one image here)."""
        index = json.loads((self.root / "index.json").read_bytes())
        manifests: list[dict[str, Any]] = index["manifests"]
        if len(manifests) != 1:
            raise ValueError(
                f"{self.root}: expected one manifest in index.json, found {len(manifests)}"
            )
        return manifests[0]

    def write_index(self, manifest: Blob, *, reference: str) -> None:
        """Name the image for containerd (full reference) and for OCI tools (the tag)."""
        descriptor = manifest.descriptor()
        descriptor["platform"] = {"architecture": "amd64", "os": "linux"}
        descriptor["annotations"] = {
            NAME_ANNOTATION: reference,
            REF_ANNOTATION: reference.rpartition(":")[2],
        }
        index = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [descriptor]}
        (self.root / "index.json").write_bytes(canonical_json(index))


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class _HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through it."""

    def __init__(self, sink: _Sink) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = bytes(data)
        self.sha.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)


def write_image(
    layout: Layout,
    *,
    layers: list[Layer],
    config: ImageConfig,
    epoch: int,
    history: list[str],
    reference: str,
) -> Blob:
    """Write the config, the manifest and the index; return the manifest's blob."""
    config_json = {
        "created": iso_time(epoch),
        "architecture": "amd64",
        "os": "linux",
        "config": config.as_json(),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": iso_time(epoch), "created_by": step} for step in history],
    }
    config_blob = layout.add_bytes(canonical_json(config_json), CONFIG_TYPE)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config_blob.descriptor(),
        "layers": [layer.blob.descriptor() for layer in layers],
    }
    manifest_blob = layout.add_bytes(canonical_json(manifest), MANIFEST_TYPE)
    layout.write_index(manifest_blob, reference=reference)
    return manifest_blob


def reuse_layers(source: Layout, target: Layout) -> tuple[list[Layer], list[dict[str, Any]]]:
    """Copy ``source``'s layers into ``target``; return them and the source's history."""
    manifest = source.read_json(source.manifest_descriptor()["digest"])
    config = source.read_json(manifest["config"]["digest"])
    layers = []
    for descriptor, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True):
        shutil.copyfile(
            source.blob_path(descriptor["digest"]), target.blob_path(descriptor["digest"])
        )
        blob = Blob(descriptor["digest"], descriptor["size"], descriptor["mediaType"])
        layers.append(Layer(blob, diff_id))
    return layers, list(config.get("history", []))


def pack_archive(layout: Layout, archive: Path, *, epoch: int) -> None:
    """Tar the layout into an ``oci-archive``, sorted, with fixed times and owners."""
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layout.root.rglob("*"), key=lambda p: p.relative_to(layout.root).parts):
            if path.name.startswith("."):
                continue
            info = tar.gettarinfo(str(path), arcname=path.relative_to(layout.root).as_posix())
            _normalise(info, epoch=epoch)
            info.mode = 0o755 if info.isdir() else 0o644
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)


def unpack_archive(archive: Path, folder: Path) -> Layout:
    """Extract an ``oci-archive`` into ``folder`` (a layout again)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        # Extraction filters came in 3.11.4; Debian's python3 is 3.11.2. The archives are ours.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)
    return Layout(folder)


def files_in_archive(archive: Path, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The regular files of the image in an ``oci-archive`` whose paths (no leading ``/``)
    `wanted` accepts, as its layers leave them (a later layer's file replaces an earlier's)."""
    found: dict[str, bytes] = {}
    with tarfile.open(archive) as outer:

        def member(name: str) -> IO[bytes]:
            opened = outer.extractfile(name)
            if opened is None:
                raise ValueError(f"{archive}: no {name}")
            return opened

        def blob(digest: str) -> IO[bytes]:
            return member(f"blobs/sha256/{digest.removeprefix('sha256:')}")

        index = json.loads(member("index.json").read())
        manifest = json.loads(blob(index["manifests"][0]["digest"]).read())
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as tar:
                for info in tar:
                    name = info.name.removeprefix("./")
                    if info.isfile() and wanted(name) and (data := tar.extractfile(info)):
                        found[name] = data.read()
    return found


def archive_digest(archive: Path) -> str:
    """The manifest digest of the one image in an ``oci-archive``, read from its index."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json")
        index = json.loads(member.read())
    digest: str = index["manifests"][0]["digest"]
    return digest


def _normalise(info: tarfile.TarInfo, *, epoch: int) -> None:
    info.mtime = min(int(info.mtime), epoch)
    info.uname = info.gname = ""
    info.pax_headers = {}
    if info.isdir() or info.issym() or info.islnk():
        info.size = 0


def file_entry(name: str, data: bytes, *, mode: int, epoch: int, uid: int = 0) -> tarfile.TarInfo:
    """A tar header for a regular file owned by ``uid``."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, epoch
    info.uid = info.gid = uid
    return info


def dir_entry(name: str, *, epoch: int, mode: int = 0o755, uid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, epoch
    info.uid = info.gid = uid
    return info


def add_files(tar: tarfile.TarFile, files: dict[str, tuple[bytes, int]], *, epoch: int) -> None:
    """Add ``{path: (content, mode)}`` and their parent folders, sorted by path."""
    folders = sorted(
        {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
    )
    for folder in folders:
        tar.addfile(dir_entry(folder, epoch=epoch))
    for path in sorted(files):
        data, mode = files[path]
        tar.addfile(file_entry(path, data, mode=mode, epoch=epoch), io.BytesIO(data))


def copy_tar(
    source: Path, tar: tarfile.TarFile, *, epoch: int, keep: Callable[[tarfile.TarInfo], bool]
) -> None:
    """Copy the members of the tar at ``source`` that ``keep`` accepts, normalised, in order."""
    with tarfile.open(source) as src:
        for info in src:
            if keep(info):
                data = src.extractfile(info) if info.isfile() else None
                _normalise(info, epoch=epoch)
                tar.addfile(info, data)
