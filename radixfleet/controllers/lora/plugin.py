"""The LoRA controller as a plug-in: what the operator and the RBAC renderer need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library. It has no
custom resource (the catalog says which adapters a model has, and whose) and is opt-in
(`radixfleet operator run --with-lora`) until the cluster has a demand source for it.
"""

from __future__ import annotations

from radixfleet.controllers.lora.spec import NAME
from radixfleet.kit.plugin import ControllerPlugin, Deferred

PLUGIN = ControllerPlugin(
    name=NAME,
    plural=None,
    build=Deferred("radixfleet.controllers.lora.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.lora.controller:register"),
    rules=Deferred("radixfleet.controllers.lora.kube:RULES", call=False),
    opt_in=True,
    cli="radixfleet.controllers.lora.cli:lora_app",
    # A scenario's `routing: adapter_dynamic` in the fleet twin (this package's twin.py).
    twin={"routing": {"adapter_dynamic": "radixfleet.controllers.lora.twin:adapter_dynamic"}},
)
