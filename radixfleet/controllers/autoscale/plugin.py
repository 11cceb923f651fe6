"""The autoscaler as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet.controllers.autoscale.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions
from radixfleet.kit.rbac import PolicyRule


def _build(options: OperatorOptions) -> Any:
    from radixfleet.controllers.autoscale.controller import kube_controller

    return kube_controller(options)


def _register(registry: Any, controller: Any) -> None:
    from radixfleet.controllers.autoscale.controller import register

    register(registry, controller)


def _rules() -> Sequence[PolicyRule]:
    from radixfleet.controllers.autoscale.kube import RULES

    return RULES


PLUGIN = ControllerPlugin(
    name="autoscale",
    objects="radixfleet.controllers.autoscale.objects:catalog_objects",
    plural=PLURAL,
    build=_build,
    register=_register,
    rules=_rules,
    twin={"autoscale": {"radixfleet": "radixfleet.controllers.autoscale.twin:radixfleet"}},
    cli="radixfleet.controllers.autoscale.cli:autoscale_app",
)
