"""The registry of controllers: one list of import paths, loaded lazily.

Adding a controller is one package with a `plugin.py` and one line below. The kernel names the
controllers only as strings, so nothing here imports a controller until `plugins()` is called
(an import-linter contract keeps `radixfleet` from importing them statically). Every function
reads `CONTROLLERS` when called (`paths=None`), so the operator, its RBAC, the catalog's
objects, the CRDs, the command line and the twin all see the same list
(tests/kit/test_registry.py adds a sixth controller by that one line).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from radixfleet.config.catalog import Catalog
from radixfleet.config.serving import Served
from radixfleet.kit.crd import kopf_peering
from radixfleet.kit.plugin import ControllerPlugin, resolve

CONTROLLERS: tuple[str, ...] = (
    "radixfleet.controllers.canary.plugin:PLUGIN",
    "radixfleet.controllers.autoscale.plugin:PLUGIN",
    "radixfleet.controllers.quota.plugin:PLUGIN",
    "radixfleet.controllers.failover.plugin:PLUGIN",
    "radixfleet.controllers.routers.plugin:PLUGIN",
    "radixfleet.controllers.lora.plugin:PLUGIN",
)


class UnknownControllerError(ValueError):
    """A controller name that no registered plug-in has."""


def load(path: str) -> ControllerPlugin:
    """The plug-in at `module:attribute`."""
    plugin = resolve(path)
    if not isinstance(plugin, ControllerPlugin):
        raise TypeError(f"{path} is a {type(plugin).__name__}, not a ControllerPlugin")
    return plugin


def plugins(paths: Sequence[str] | None = None) -> tuple[ControllerPlugin, ...]:
    """Every registered plug-in, in registry order."""
    return _loaded(tuple(CONTROLLERS if paths is None else paths))


@cache
def _loaded(paths: tuple[str, ...]) -> tuple[ControllerPlugin, ...]:
    return tuple(load(path) for path in paths)


def selected(
    *, opt_in: Iterable[str] = (), paths: Sequence[str] | None = None
) -> list[ControllerPlugin]:
    """The plug-ins to run: every one that is not opt-in, and the opt-in ones named."""
    wanted = set(opt_in)
    known = {p.name for p in plugins(paths)}
    if unknown := sorted(wanted - known):
        raise UnknownControllerError(f"no controller {', '.join(unknown)}; known: {sorted(known)}")
    return [p for p in plugins(paths) if not p.opt_in or p.name in wanted]


def twin_policies(kind: str, *, paths: Sequence[str] | None = None) -> dict[str, str]:
    """The twin policies of `kind` the plug-ins provide: {name: "module:factory"}."""
    found: dict[str, str] = {}
    for plugin in plugins(paths):
        found |= plugin.twin.get(kind, {})
    return found


def twin_policy(kind: str, name: str, *, paths: Sequence[str] | None = None) -> str | None:
    """The `module:factory` of twin policy `name` of `kind` a plug-in provides, if any."""
    return twin_policies(kind, paths=paths).get(name)


def controller_apps(*, paths: Sequence[str] | None = None) -> list[tuple[str, Any]]:
    """(name, typer app) of every plug-in with a command line, for `radixfleet NAME ...`."""
    apps = []
    for plugin in plugins(paths):
        if plugin.cli is not None:
            apps.append((plugin.name, resolve(plugin.cli)))
    return apps


def catalog_objects(
    catalog: Catalog, served: Iterable[Served], *, paths: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The controllers' own objects for `catalog`'s models `served` (model, tenant pairs):
    each plug-in's `objects`, in registry order. `radixfleet render` writes them into
    inferenceservices/ and `pulumi up` into each region, so what a catalog renders is decided
    once, by the controllers that own the objects."""
    pairs = list(served)
    found: list[dict[str, Any]] = []
    for plugin in plugins(paths):
        if plugin.objects is not None:
            found += resolve(plugin.objects)(catalog, pairs)
    return found


def crds(*, paths: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions the operator needs: each plug-in's, generated from its
    spec type, in registry order, then kopf's peering (leader election, `kit/leader.py`)."""
    found = [resolve(p.crd)() for p in plugins(paths) if p.crd is not None]
    return [*found, kopf_peering()]


def entry_gate(*, paths: Sequence[str] | None = None) -> ControllerPlugin:
    """The one plug-in that gates the region entry (authenticates and charges requests)."""
    gating = [p for p in plugins(paths) if p.entry_gate is not None]
    if len(gating) != 1:
        names = [p.name for p in gating]
        raise UnknownControllerError(f"the region entry needs one gate; plug-ins offer {names}")
    return gating[0]


def load_entry_gate(plugin: ControllerPlugin) -> Any:
    """The gate factory a plug-in names."""
    assert plugin.entry_gate is not None
    return resolve(plugin.entry_gate)
