"""The adapter controller as a plug-in: what the operator and the RBAC renderer need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library. It has no
custom resource (the catalog says which adapters a model has, and whose) and is opt-in
(`radixfleet operator run --with-adapters`) until the cluster has a demand source for it.
"""

from __future__ import annotations

from radixfleet.controllers.adapters.spec import NAME
from radixfleet.kit.plugin import ControllerPlugin, Deferred

PLUGIN = ControllerPlugin(
    name=NAME,
    plural=None,
    build=Deferred("radixfleet.controllers.adapters.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.adapters.controller:register"),
    rules=Deferred("radixfleet.controllers.adapters.kube:RULES", call=False),
    opt_in=True,
    cli="radixfleet.controllers.adapters.cli:adapters_app",
    # A scenario's `routing: adapter_dynamic` in the fleet twin (this package's twin.py).
    twin={"routing": {"adapter_dynamic": "radixfleet.controllers.adapters.twin:adapter_dynamic"}},
)
