"""Debian root file systems from ``mmdebstrap``, from the mirror this machine's apt uses: the
``base`` and ``python`` images.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Sequence
from pathlib import Path

from testbed.images.cache import (
    EPOCH,
    NONROOT,
    PATH_ENV,
    ImageError,
    ImageRecord,
    Inputs,
    ensure_image,
    run_tool,
    tool_version,
)
from testbed.oci import (
    FORMAT,
    ImageConfig,
    Layout,
    copy_tar,
    write_image,
)

SUITE = "bookworm"
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
