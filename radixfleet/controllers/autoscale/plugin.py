"""The autoscaler as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from radixfleet.controllers.autoscale.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, Deferred

PLUGIN = ControllerPlugin(
    name="autoscale",
    objects="radixfleet.controllers.autoscale.objects:catalog_objects",
    plural=PLURAL,
    crd="radixfleet.controllers.autoscale.crd:crd",
    build=Deferred("radixfleet.controllers.autoscale.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.autoscale.controller:register"),
    rules=Deferred("radixfleet.controllers.autoscale.kube:RULES", call=False),
    twin={"autoscale": {"radixfleet": "radixfleet.controllers.autoscale.twin:radixfleet"}},
    cli="radixfleet.controllers.autoscale.cli:autoscale_app",
)
