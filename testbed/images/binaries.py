"""Images of one static program: ``pause`` (our own C program) on scratch, and any static Go
binary (from ``testbed.gobuild``) on the base.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from testbed.images.cache import (
    EPOCH,
    FILES,
    NONROOT,
    PATH_ENV,
    ImageRecord,
    Inputs,
    ensure_image,
    run_tool,
    tool_version,
)
from testbed.images.debian import base
from testbed.oci import (
    FORMAT,
    ImageConfig,
    Layout,
    add_files,
    reuse_layers,
    unpack_archive,
    write_image,
)

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
