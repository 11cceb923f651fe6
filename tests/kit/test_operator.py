"""The operator: one kopf registry for every controller, its settings set once, its metrics."""

from __future__ import annotations

from typing import Any

import kopf
from prometheus_client import generate_latest

from radixfleet.kit.kopfglue import KOPF_PREFIX, configure
from radixfleet.kit.operator import build_registry, metrics_registry
from radixfleet.kit.registry import selected


class Fake:
    """A controller stand-in; handlers never run here."""

    metrics = None


def test_every_selected_controller_lands_in_one_registry() -> None:
    plugins = selected(opt_in=["failover"])
    controllers: dict[str, Any] = {p.name: Fake() for p in plugins}
    registry = build_registry(plugins, controllers, peering="radixfleet", priority=7)
    timers = {h.id for h in registry._spawning.get_all_handlers()}
    assert timers == {"canary-tick", "autoscale-tick", "failover-tick"}
    watches = {h.id for h in registry._watching.get_all_handlers()}
    assert watches == {  # the quota's three, the routers' one
        "quota-wake-tenants", "quota-wake-inferenceservices", "quota-wake-resourcequotas",
        "routers-wake-inferenceservices",
    }  # fmt: skip


def test_settings_are_the_operators_once() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, peering="radixfleet", priority=7)
    assert settings.peering.name == "radixfleet" and settings.peering.priority == 7
    assert settings.peering.mandatory and settings.peering.clusterwide
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == KOPF_PREFIX
    alone = kopf.OperatorSettings()
    configure(alone, peering=None, priority=7)
    assert not alone.peering.mandatory


def test_the_metrics_port_serves_the_kits_counters() -> None:
    plugins = selected()
    served = metrics_registry(plugins, {p.name: Fake() for p in plugins})
    text = generate_latest(served).decode()
    for name in ("radixfleet_controller_ticks", "radixfleet_controller_errors",
                 "radixfleet_controller_decisions"):  # fmt: skip
        assert f"# TYPE {name}_total counter" in text


def test_the_operator_logs_in_on_its_own_registry() -> None:
    # kopf adds its login handlers to its default registry only: without ours, a fresh registry
    # never authenticates ("Ran out of valid credentials"), which the old per-controller runs hit.
    registry = build_registry([], {}, peering=None, priority=1)
    activities = {str(h.activity) for h in registry._activities.get_all_handlers()}
    assert {"authentication", "startup"} <= {a.rsplit(".", 1)[-1].lower() for a in activities}
