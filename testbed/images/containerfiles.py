"""Containerfiles built by ``buildah`` FROM our Python base by digest: ``radixfleet`` (the
repository's ``Containerfile``), ``smg`` and KServe's storage initializer.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from testbed.images.cache import (
    CA_BUNDLE,
    EPOCH,
    FILES,
    KEEP_BUILDS,
    REPO,
    ImageError,
    ImageRecord,
    Inputs,
    cache_root,
    ensure_image,
    prune,
    run_tool,
    tool_version,
)
from testbed.images.debian import python_base
from testbed.oci import (
    FORMAT,
    Blob,
    Layout,
    files_in_archive,
)

# What the radixfleet image's build context holds: the project, its metadata and its lock.
PROJECT_FILES = ("pyproject.toml", "uv.lock", "README.md")
PROJECT_PACKAGES = ("radixfleet",)


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
    """The SGLang gateway image: ``smg`` 1.13.0 with its hash-pinned dependencies, and the
    emulated replica's tokenizer (`ROUTER_TOKENIZER`), which the test bed's models name."""
    emulator = _emulator_tokenizer()
    tokenizer = {f"tokenizers/emulator/{p.name}": p for p in sorted(emulator.iterdir())}
    return _buildah_image(
        "smg",
        containerfile=FILES / "smg.Containerfile",
        context_root=FILES,
        files=[FILES / "smg-requirements.txt", FILES / "tokenizers" / "README.md"],
        extra=tokenizer,
    )


# Where the radixfleet image keeps the emulated replica's tokenizer (its Containerfile builds it).
IMAGE_TOKENIZER = re.compile(r"opt/radixfleet/cache/tokenizer-[0-9a-f]+/[^/]+")


def _emulator_tokenizer() -> Path:
    """A folder with the emulated replica's tokenizer, as the radixfleet image holds it: built
    there, where the project's packages are (these builders use the standard library only), and
    read out of its archive once per image."""
    image = radixfleet()
    root = cache_root() / "smg" / "emulator-tokenizer"
    folder = root / image.digest.removeprefix("sha256:")[:16]
    if folder.is_dir():
        return folder
    files = files_in_archive(image.archive, lambda name: bool(IMAGE_TOKENIZER.fullmatch(name)))
    if not any(name.endswith("/tokenizer.json") for name in files):
        raise ImageError(f"{image.archive}: no emulator tokenizer under /opt/radixfleet/cache")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".read-"))
    for name, data in files.items():
        (staging / Path(name).name).write_bytes(data)
    staging.chmod(0o755)
    staging.rename(folder)
    prune(root, keep=KEEP_BUILDS)
    return folder


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
    name: str,
    *,
    containerfile: Path,
    context_root: Path,
    files: list[Path],
    extra: Mapping[str, Path] | None = None,
) -> ImageRecord:
    """`files` go into the build context where they are under `context_root`; `extra`, from
    anywhere, under the context paths it names."""
    under = python_base()
    inputs = Inputs(name).text("base", under.digest).file(containerfile, label="Containerfile")
    inputs.tree(context_root, files).text("buildah", tool_version(("buildah", "--version")))
    for target, source in (extra or {}).items():
        inputs.file(source, label=target)
    inputs.text("format", FORMAT)
    placed = {path.relative_to(context_root).as_posix(): path for path in files}
    placed.update(extra or {})

    def build(work: Path, reference: str) -> Layout:
        context = work / "context"
        for target, source in placed.items():
            copy = context / target
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
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
