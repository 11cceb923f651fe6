"""The quota as a controller plug-in: what the operator, the RBAC renderer and the twin need.

Listed in `radixfleet.kit.registry.CONTROLLERS`; loading it imports no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet.controllers.quota.spec import PLURAL
from radixfleet.kit.plugin import ControllerPlugin, OperatorOptions
from radixfleet.kit.rbac import PolicyRule


def _build(options: OperatorOptions) -> Any:
    from radixfleet.controllers.quota.controller import kube_controller

    return kube_controller(options)


def _register(registry: Any, controller: Any) -> None:
    from radixfleet.controllers.quota.controller import register

    register(registry, controller)


def _rules() -> Sequence[PolicyRule]:
    from radixfleet.controllers.quota.kube import RULES

    return RULES


def _entry_rules() -> Sequence[PolicyRule]:
    from radixfleet.controllers.quota.entry import RULES

    return RULES


def _admission() -> Sequence[dict[str, Any]]:
    from radixfleet.controllers.quota.admission import manifests

    return manifests()


def _metrics(controller: Any) -> Any:
    return None if controller.metrics is None else controller.metrics.registry


PLUGIN = ControllerPlugin(
    name="quota",
    objects="radixfleet.controllers.quota.objects:catalog_objects",
    plural=PLURAL,
    build=_build,
    register=_register,
    rules=_rules,
    twin={"admission": {"token_budgets": "radixfleet.controllers.quota.twin:token_budgets"}},
    metrics=_metrics,
    cli="radixfleet.controllers.quota.cli:quota_app",
    entry_gate="radixfleet.controllers.quota.entry:build",
    entry_rules=_entry_rules,
    admission=_admission,
)
