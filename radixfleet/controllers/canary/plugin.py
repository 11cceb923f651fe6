"""The canary as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from typing import Any

from radixfleet.controllers.canary.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, Deferred


def _metrics(controller: Any) -> Any:
    return None if controller.metrics is None else controller.metrics.registry


PLUGIN = ControllerPlugin(
    name="canary",
    objects="radixfleet.controllers.canary.objects:catalog_objects",
    plural=PLURAL,
    crd="radixfleet.controllers.canary.crd:crd",
    build=Deferred("radixfleet.controllers.canary.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.canary.controller:register"),
    rules=Deferred("radixfleet.controllers.canary.kube:RULES", call=False),
    twin={
        "canary": {
            "radixfleet": "radixfleet.controllers.canary.twin:radixfleet",
            "radixfleet_baseline": "radixfleet.controllers.canary.twin:radixfleet_baseline",
            "no_analysis": "radixfleet.controllers.canary.twin:no_analysis",
        }
    },
    metrics=_metrics,
    cli="radixfleet.controllers.canary.cli:canary_app",
)
