"""The image ships the project's own dependencies, not the Pulumi SDKs only infra/ needs.

The SDKs sit in the `infra` dependency group, which `uv sync` installs by default for
development (pyproject's `default-groups`). Each uv command of the Containerfile is read the way
uv selects groups, so a flag that leaves a default group in (`--no-dev` does: it drops `dev`
alone) fails here; the image itself cannot be built in the unit tests.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
PULUMI_SDKS = {"pulumi", "pulumi-aws", "pulumi-kubernetes", "pulumi-random"}


def pyproject() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def _name(requirement: str) -> str:
    for stop in "<>=!~[; ":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower()


def uv_commands() -> list[list[str]]:
    """Every `uv sync` and `uv export` the Containerfile runs, as argument lists."""
    text = (REPO / "Containerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    runs = [line.removeprefix("RUN ") for line in text.splitlines() if line.startswith("RUN ")]
    commands = [shlex.split(part) for run in runs for part in run.split("&&")]
    return [argv for argv in commands if argv[:1] and argv[0].endswith("/uv")]


def groups_installed(argv: list[str], *, defaults: list[str], every: list[str]) -> set[str]:
    """The dependency groups a uv command installs, by uv's rules for its group flags."""
    if "--all-groups" in argv:
        return set(every)
    only = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--only-group"}
    if only or "--only-dev" in argv:
        return only | ({"dev"} if "--only-dev" in argv else set())
    groups = set() if "--no-default-groups" in argv else set(defaults)
    groups |= {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--group"}
    groups -= {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--no-group"}
    return groups - ({"dev"} if "--no-dev" in argv else set())


def test_the_pulumi_sdks_are_in_the_infra_group_only() -> None:
    data = pyproject()
    main = {_name(r) for r in data["project"]["dependencies"]}
    assert not main & PULUMI_SDKS, "the image installs every main dependency"
    assert {_name(r) for r in data["dependency-groups"]["infra"]} == PULUMI_SDKS
    # `uv sync --frozen` (the Makefile's setup, so CI) still installs them for infra's tests.
    assert "infra" in data["tool"]["uv"]["default-groups"]


def test_the_containerfile_installs_with_uv() -> None:
    verbs = sorted(argv[1] for argv in uv_commands())
    assert verbs == ["export", "sync", "sync"], verbs


@pytest.mark.parametrize("argv", [pytest.param(a, id=" ".join(a[1:])) for a in uv_commands()])
def test_the_image_installs_neither_infra_nor_dev(argv: list[str]) -> None:
    data = pyproject()
    defaults = data["tool"]["uv"]["default-groups"]
    installed = groups_installed(argv, defaults=defaults, every=list(data["dependency-groups"]))
    assert installed == set(), f"{shlex.join(argv)} installs {sorted(installed)}"


@pytest.mark.parametrize(
    ("flags", "groups"),
    [
        pytest.param([], {"dev", "infra"}, id="defaults"),
        pytest.param(["--no-dev"], {"infra"}, id="no-dev-keeps-infra"),
        pytest.param(["--no-default-groups"], set(), id="no-default-groups"),
        pytest.param(["--no-group", "infra"], {"dev"}, id="no-group"),
        pytest.param(["--only-group", "infra"], {"infra"}, id="only-group"),
    ],
)
def test_group_rules(flags: list[str], groups: set[str]) -> None:
    """The reading above, on the flags uv documents (a reading that saw no group would pass the
    image whatever it installed)."""
    argv = ["uv", "sync", *flags]
    assert groups_installed(argv, defaults=["dev", "infra"], every=["dev", "infra"]) == groups
