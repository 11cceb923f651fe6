"""The failover as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Opt-in: it writes global Route 53 records, so one operator per fleet runs it
(`radixfleet operator run --with-failover`), not one per region. Listed in
`radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet.controllers.failover.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions
from radixfleet.kit.rbac import PolicyRule


def _build(options: OperatorOptions) -> Any:
    from radixfleet.controllers.failover.controller import kube_controller

    return kube_controller(options)


def _register(registry: Any, controller: Any) -> None:
    from radixfleet.controllers.failover.controller import register

    register(registry, controller)


def _rules() -> Sequence[PolicyRule]:
    from radixfleet.controllers.failover.kube import RULES

    return RULES


PLUGIN = ControllerPlugin(
    name="failover",
    plural=PLURAL,
    build=_build,
    register=_register,
    rules=_rules,
    twin={"traffic": {"radixfleet": "radixfleet.controllers.failover.twin:radixfleet"}},
    metrics=lambda controller: controller.metrics.registry,
    cli="radixfleet.controllers.failover.cli:failover_app",
    opt_in=True,
)
