"""The named-layers contract (pyproject.toml, ARCHITECTURE.md) places every package and
top-level module of radixfleet: one left out would be held by no layer at all. And no two
modules import each other, not even for a type (import-linter's contracts hold layers, not
cycles within one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

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


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import graph's cycles between modules: its strongly connected components of more than
    one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        on_stack.append(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = on_stack[on_stack.index(module) :]
                    del on_stack[on_stack.index(module) :]
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                on_stack.append(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
            elif child in on_stack:
                low[module] = min(low[module], index[child])
    return found


def test_no_two_files_import_each_other_even_for_types() -> None:
    """No import cycle between modules, counting those made for type checking only: a part
    that needs another's type takes a port (a Protocol) or the type's own module instead
    (radixfleet/twin/service.py's RegionHost, radixfleet/emulator/grpc_server.py's ServedReplica,
    radixfleet/emulator/config.py)."""
    graph = grimp.build_graph("radixfleet", "infra", "testbed")
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.one", "a.two", "a.three"):
        graph.add_module(module)
    graph.add_import(importer="a.one", imported="a.two")
    graph.add_import(importer="a.two", imported="a.one")
    graph.add_import(importer="a.three", imported="a.one")
    assert _cycles(graph) == [["a.one", "a.two"]]
