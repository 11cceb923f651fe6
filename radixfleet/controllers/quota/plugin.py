"""The quota as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from typing import Any

from radixfleet.controllers.quota.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, Deferred


def _metrics(controller: Any) -> Any:
    return None if controller.metrics is None else controller.metrics.registry


PLUGIN = ControllerPlugin(
    name="quota",
    objects="radixfleet.controllers.quota.objects:catalog_objects",
    plural=PLURAL,
    crd="radixfleet.controllers.quota.crd:crd",
    build=Deferred("radixfleet.controllers.quota.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.quota.controller:register"),
    rules=Deferred("radixfleet.controllers.quota.kube:RULES", call=False),
    twin={"admission": {"token_budgets": "radixfleet.controllers.quota.twin:token_budgets"}},
    metrics=_metrics,
    cli="radixfleet.controllers.quota.cli:quota_app",
    entry_gate="radixfleet.controllers.quota.entry:build",
    entry_rules=Deferred("radixfleet.controllers.quota.entry:RULES", call=False),
    admission=Deferred("radixfleet.controllers.quota.admission:manifests"),
)
