"""The named-layers contract (pyproject.toml, ARCHITECTURE.md) places every package and
top-level module of radixfleet: one left out would be held by no layer at all."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _layered() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"]
                   if c["name"].startswith("Named layers")]  # fmt: skip
    names = set()
    for layer in contract["layers"]:
        names |= {n.strip() for n in layer.replace("|", ":").split(":")}
    return names


def _top_level_modules() -> set[str]:
    """radixfleet's modules and packages, and each controller (a layer of its own siblings)."""
    package = REPO / "radixfleet"
    found = {f"radixfleet.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    found |= {f"radixfleet.{p.parent.name}" for p in package.glob("*/__init__.py")}
    found.discard("radixfleet.controllers")
    found |= {
        f"radixfleet.controllers.{p.parent.name}" for p in package.glob("controllers/*/__init__.py")
    }
    return found


def test_every_part_of_radixfleet_sits_in_a_layer() -> None:
    missing = sorted(_top_level_modules() - _layered())
    assert missing == [], f"not in the named layers of pyproject.toml: {missing}"
