"""The registry of controllers: plug-ins found by import path, and the kernel importing none."""

from __future__ import annotations

import subprocess
import sys

import kopf
import pytest

from radixfleet.kit.plugin import ControllerPlugin
from radixfleet.kit.registry import (
    CONTROLLERS,
    UnknownControllerError,
    load,
    plugins,
    selected,
    twin_policy,
)
from radixfleet.twin.registry import resolve


def test_every_registered_controller_is_a_plugin_and_no_two_share_a_crd() -> None:
    found = plugins()
    assert [p.name for p in found] == ["canary", "autoscale", "quota", "failover", "routers"]
    with_crd = [p.plural for p in found if p.plural is not None]
    assert len(set(with_crd)) == len(with_crd) == 4
    assert all(isinstance(p, ControllerPlugin) for p in found)


def test_the_failover_runs_only_when_asked() -> None:
    assert [p.name for p in selected()] == ["canary", "autoscale", "quota", "routers"]
    assert "failover" in [p.name for p in selected(opt_in=["failover"])]
    with pytest.raises(UnknownControllerError):
        selected(opt_in=["nope"])


def test_a_path_that_is_not_a_plugin_is_refused() -> None:
    with pytest.raises(TypeError):
        load("radixfleet.kit.registry:CONTROLLERS")


@pytest.mark.parametrize("plugin", plugins(), ids=lambda p: p.name)
def test_each_plugin_registers_its_handlers_without_side_effects(plugin: ControllerPlugin) -> None:
    registry = kopf.OperatorRegistry()
    plugin.register(registry, object())  # a controller is only called by a handler
    handlers = [*registry._spawning.get_all_handlers(), *registry._watching.get_all_handlers()]
    assert handlers, f"{plugin.name} registered no handler"


def test_the_canary_plugs_into_the_twin_like_the_others() -> None:
    assert twin_policy("canary", "radixfleet") == "canary.twin:radixfleet"
    assert callable(resolve("canary", "radixfleet"))
    assert callable(resolve("canary", "no_analysis"))


@pytest.mark.parametrize(
    "module",
    ["radixfleet.kit.registry", "radixfleet.twin.registry", "radixfleet.twin.run"],
)
def test_the_kernel_imports_no_controller_on_import(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('canary', 'policies')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_registry_is_one_list_of_strings() -> None:
    assert all(isinstance(p, str) and ":" in p for p in CONTROLLERS)
