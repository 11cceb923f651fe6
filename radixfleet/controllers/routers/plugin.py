"""The routers as a controller plug-in: what the operator and the RBAC renderer need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from radixfleet.controllers.routers.settings import SETTINGS
from radixfleet.controllers.routers.spec import NAME
from radixfleet.kit.plugin import ControllerPlugin, Deferred

PLUGIN = ControllerPlugin(
    name=NAME,
    plural=None,
    objects="radixfleet.controllers.routers.objects:catalog_objects",
    build=Deferred("radixfleet.controllers.routers.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.routers.controller:register"),
    rules=Deferred("radixfleet.controllers.routers.kube:RULES", call=False),
    cli="radixfleet.controllers.routers.cli:routers_app",
    settings=SETTINGS,
)
