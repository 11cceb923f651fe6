"""The README's image build commands work as written, outside the test bed.

Each documented build names a Containerfile and a context that exist, the context holds what the
Containerfile copies, every `--build-arg` is an ARG the Containerfile declares, the base has a
default (a plain build needs no arguments), and the tags are the images the example stack
deploys by digest. The test bed's own build still passes its base explicitly.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infra.testing import example_config, radixfleet_values
from testbed import images
from testbed.images import containerfiles

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
# The start of the section's title ("Build and push the images"), as any README spelled it.
SECTION = "**Build and push the image"
SMG = "testbed/containerfiles/smg.Containerfile"
# (tool, subcommand) pairs that build an image from a Containerfile.
BUILDERS = {("docker", "build"), ("podman", "build"), ("buildah", "bud"), ("buildah", "build")}
ARG = re.compile(r"^ARG\s+(\w+)(?:=(\S*))?", re.MULTILINE)
COPY = re.compile(r"^COPY\s+(?!--from)(.+)$", re.MULTILINE)


@dataclass
class Build:
    """One documented build command, its options read as the builder reads them."""

    containerfile: str = "Containerfile"
    context: str = ""
    tags: list[str] = field(default_factory=list)
    build_args: dict[str, str] = field(default_factory=dict)


def _console_block(text: str, after: str) -> str:
    start = text.index("```console\n", text.index(after)) + len("```console\n")
    return text[start : text.index("```", start)]


def _parse(argv: list[str]) -> Build:
    build, rest = Build(), iter(argv[2:])
    for word in rest:
        option, _, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if option in ("-f", "--file"):
            build.containerfile = inline or next(rest)
        elif option in ("-t", "--tag"):
            build.tags.append(inline or next(rest))
        elif option == "--build-arg":
            name, _, value = (inline or next(rest)).partition("=")
            build.build_args[name] = value
        else:
            build.context = word
    return build


def documented_builds() -> list[Build]:
    """The build commands of the README's "Build and push the images" console block."""
    lines = _console_block(README.read_text(encoding="utf-8"), SECTION).splitlines()
    commands = [shlex.split(line.removeprefix("$ "), comments=True) for line in lines]
    return [_parse(argv) for argv in commands if tuple(argv[:2]) in BUILDERS]


def declared_args(containerfile: Path) -> dict[str, str | None]:
    """The ARGs a Containerfile declares, with their defaults (None: no default)."""
    text = containerfile.read_text(encoding="utf-8")
    return {m[1]: m[2] for m in ARG.finditer(text)}


BUILDS = [pytest.param(b, id=b.containerfile) for b in documented_builds()]


def test_the_readme_builds_both_images_the_stack_deploys() -> None:
    assert sorted(b.containerfile for b in documented_builds()) == ["Containerfile", SMG]


@pytest.mark.parametrize("build", BUILDS)
def test_a_documented_build_names_files_that_exist(build: Build) -> None:
    assert (REPO / build.containerfile).is_file(), build.containerfile
    context = REPO / build.context
    assert build.context and context.is_dir(), build.context
    text = (REPO / build.containerfile).read_text(encoding="utf-8")
    # What the Containerfile copies from its context must be in the context documented.
    for sources in COPY.findall(text):
        for source in sources.split()[:-1]:
            assert (context / source).exists(), f"{build.containerfile}: COPY {source}"


@pytest.mark.parametrize("build", BUILDS)
def test_a_documented_build_passes_only_declared_args(build: Build) -> None:
    declared = declared_args(REPO / build.containerfile)
    assert set(build.build_args) <= set(declared), declared


@pytest.mark.parametrize("build", BUILDS)
def test_a_documented_build_has_a_default_base(build: Build) -> None:
    base = declared_args(REPO / build.containerfile).get("BASE_IMAGE")
    # A public image by a name any registry client resolves: registry/repository:tag.
    assert base and re.match(r"^[a-z0-9.-]+\.[a-z]+/[a-z0-9/._-]+:[\w.-]+(@sha256:\w+)?$", base)


def test_documented_tags_are_the_images_the_example_stack_deploys() -> None:
    controllers: dict[str, Any] = radixfleet_values(example_config())["controllers"]
    expected = {
        f"{controllers['image']}:{controllers['tag']}",
        f"{controllers['router']['image']}:{controllers['router']['tag']}",
    }
    tags = {
        t.replace("REGISTRY", "registry.example.com") for b in documented_builds() for t in b.tags
    }
    assert tags == expected


class _StopBuildError(Exception):
    """Ends a recorded build after buildah's build step."""


def test_the_test_bed_passes_its_own_base_by_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Containerfiles' defaults are for builds elsewhere: here the base is ours, by digest."""
    calls: list[list[str]] = []

    def record(command: list[str], **kwargs: Any) -> str:
        calls.append(list(command))
        if kwargs["step"] == "buildah bud":
            raise _StopBuildError
        return ""

    monkeypatch.setattr(containerfiles, "run_tool", record)  # where _buildah finds it
    base = images.ImageRecord(
        "python", tmp_path / "base.tar", "localhost/radixfleet/python:abc", "sha256:d1", 0, 0.0
    )
    with pytest.raises(_StopBuildError):
        containerfiles._buildah(
            "smg", base, REPO / SMG, tmp_path / "ctx", work=tmp_path / "w", reference="smg:1"
        )
    bud = calls[-1]
    assert bud[bud.index("--build-arg") + 1] == "BASE_IMAGE=localhost/radixfleet/python@sha256:d1"


def test_the_image_context_is_what_the_containerfile_copies_and_the_wheel_ships() -> None:
    """The test bed hands the image build the files it hashes: the packages the Containerfile
    copies, the wheel installs and `.dockerignore` lets into a documented build, no more and no
    fewer (a package left out is an image that cannot import it; one left in, a rebuild for
    nothing)."""
    copied = {
        source.rstrip("/")
        for sources in COPY.findall((REPO / "Containerfile").read_text())
        for source in shlex.split(sources)[:-1]
    }
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = set(wheel["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    assert set(images.PROJECT_PACKAGES) == shipped == copied - set(images.PROJECT_FILES)
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    let_in = {line[1:] for line in ignore if line.startswith("!")}
    assert let_in == {*images.PROJECT_FILES, *images.PROJECT_PACKAGES}, ".dockerignore"
