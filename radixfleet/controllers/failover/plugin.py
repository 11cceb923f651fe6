"""The failover as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Opt-in: it writes global Route 53 records, so one operator per fleet runs it
(`radixfleet operator run --with-failover`), not one per region. Listed in
`radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from radixfleet.controllers.failover.settings import SETTINGS
from radixfleet.controllers.failover.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, Deferred

PLUGIN = ControllerPlugin(
    name="failover",
    plural=PLURAL,
    crd="radixfleet.controllers.failover.crd:crd",
    build=Deferred("radixfleet.controllers.failover.controller:kube_controller"),
    register=Deferred("radixfleet.controllers.failover.controller:register"),
    rules=Deferred("radixfleet.controllers.failover.kube:RULES", call=False),
    twin={"traffic": {"radixfleet": "radixfleet.controllers.failover.twin:radixfleet"}},
    metrics=lambda controller: controller.metrics.registry,
    cli="radixfleet.controllers.failover.cli:failover_app",
    opt_in=True,
    settings=SETTINGS,
)
