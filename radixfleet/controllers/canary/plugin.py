"""The canary as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet.controllers.canary.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions
from radixfleet.kit.rbac import PolicyRule


def _build(options: OperatorOptions) -> Any:
    from radixfleet.controllers.canary.controller import kube_controller

    return kube_controller(options)


def _register(registry: Any, controller: Any) -> None:
    from radixfleet.controllers.canary.controller import register

    register(registry, controller)


def _rules() -> Sequence[PolicyRule]:
    from radixfleet.controllers.canary.kube import RULES

    return RULES


def _metrics(controller: Any) -> Any:
    return None if controller.metrics is None else controller.metrics.registry


PLUGIN = ControllerPlugin(
    name="canary",
    objects="radixfleet.controllers.canary.objects:catalog_objects",
    plural=PLURAL,
    build=_build,
    register=_register,
    rules=_rules,
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
