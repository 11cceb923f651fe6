"""The routers as a controller plug-in: what the operator and the RBAC renderer need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet.controllers.routers.spec import NAME
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions
from radixfleet.kit.rbac import PolicyRule


def _build(options: OperatorOptions) -> Any:
    from radixfleet.controllers.routers.controller import kube_controller

    return kube_controller(options)


def _register(registry: Any, controller: Any) -> None:
    from radixfleet.controllers.routers.controller import register

    register(registry, controller)


def _rules() -> Sequence[PolicyRule]:
    from radixfleet.controllers.routers.kube import RULES

    return RULES


PLUGIN = ControllerPlugin(
    name=NAME, plural=None, build=_build, register=_register, rules=_rules,
    cli="radixfleet.controllers.routers.cli:routers_app",
)  # fmt: skip
