"""The plug-in a controller package exposes, so that the kernel can run it without importing it.

Each controller package has a `plugin.py` with one `PLUGIN = ControllerPlugin(...)`: its name,
the plural of its custom resource (if it has one), how to build its Kubernetes-backed
controller, how to add its handlers to a kopf registry, the RBAC rules its adapters declare,
the options it owns on the command line (its settings: the kit declares none for it) and its
policies for the fleet twin. `build`, `register` and `rules` import the heavy parts
(the Kubernetes client, kopf) only when called, so loading a plug-in is cheap;
`radixfleet.kit.registry` lists them by import path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from radixfleet.kit.rbac import PolicyRule
from radixfleet.kit.settings import Setting


def resolve(path: str) -> Any:
    """The attribute at `module:attribute`, its module imported now."""
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


@dataclass(frozen=True)
class Deferred:
    """A part of a controller a plug-in names without importing it (loading a plug-in stays
    cheap: no Kubernetes client, no kopf): `module:function`, imported when first called and
    called with the caller's arguments, or, with `call=False`, `module:attribute` (an adapter's
    `RULES`) returned as it is."""

    path: str
    call: bool = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        found = resolve(self.path)
        return found(*args, **kwargs) if self.call else found


@dataclass(frozen=True)
class OperatorOptions:
    """What `radixfleet operator run` (or a controller's own `run`) tells every controller.

    `region` labels metrics; `prometheus_url` overrides each controller's default; `settings`
    holds each controller's own settings by its name, as its plug-in declares them
    (`ControllerPlugin.settings`) and parsed by them: the kit knows none of them.
    """

    region: str = "local"
    prometheus_url: str | None = None
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def setting(self, controller: str, setting: Setting) -> Any:
        """`controller`'s `setting` as its command line gave it, else the setting's default."""
        given = self.settings.get(controller, {})
        return given[setting.key] if setting.key in given else setting.value(setting.default)


@dataclass(frozen=True)
class ControllerPlugin:
    """One controller as the operator, the RBAC renderer and the twin see it.

    `build(options)` makes the Kubernetes-backed controller; `register(registry, controller)`
    adds its kopf handlers (nothing happens on import); `rules()` is the RBAC its adapters and
    handlers need; `twin` maps a twin policy kind to {policy name: "module:factory"};
    `metrics(controller)` is a prometheus-client collector of the controller's own series (or
    None); `cli` is the "module:attribute" of its typer app (`radixfleet NAME ...`); `opt_in`
    controllers (the failover: one per fleet, not per region) run only when asked for by name
    (`radixfleet operator run --with-NAME`). `settings` are the options the controller owns
    (`radixfleet.kit.settings`): the operator's command offers them, so does the controller's
    own `run`, and the controller reads them with `OperatorOptions.setting`. `entry_gate` is
    the "module:factory" of the gate the region entry puts in front of its routes
    (`factory(api_client, replicas, region, *, upstream_connections)`, see
    `radixfleet.dataplane.gate`), and `entry_rules` the RBAC that gate needs. `admission()` lists
    the ValidatingAdmissionPolicies and bindings that hold the controller's rules at the API
    server (the quota's GPU budgets); they are installed with the operator. `objects` is the
    "module:function" that builds the controller's objects for a catalog's served models
    (`function(catalog, served) -> list[manifest]`, `radixfleet.kit.registry.catalog_objects`).
    `crd` is the "module:function" that builds the CustomResourceDefinition of its custom
    resource from its spec type (`function() -> manifest`, `radixfleet.kit.registry.crds`).
    """

    name: str
    plural: str | None  # of its custom resource; None for one without (the routers)
    build: Callable[[OperatorOptions], Any]
    register: Callable[[Any, Any], object]
    rules: Callable[[], Sequence[PolicyRule]]
    twin: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    metrics: Callable[[Any], Any] = field(default=lambda controller: None)
    cli: str | None = None
    opt_in: bool = False
    settings: Sequence[Setting] = ()
    entry_gate: str | None = None
    entry_rules: Callable[[], Sequence[PolicyRule]] = field(default=lambda: ())
    admission: Callable[[], Sequence[Mapping[str, Any]]] = field(default=lambda: ())
    objects: str | None = None
    crd: str | None = None
