"""The registry of controllers: plug-ins found by import path, and the kernel importing none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kopf
import pytest

from radixfleet.config import load_catalog
from radixfleet.config.serving import served
from radixfleet.kit.plugin import ControllerPlugin
from radixfleet.kit.registry import (
    CONTROLLERS,
    UnknownControllerError,
    catalog_objects,
    load,
    plugins,
    selected,
    twin_policy,
)
from radixfleet.twin.registry import resolve

REPO = Path(__file__).resolve().parents[2]


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


SIXTH_PLUGIN = """
from radixfleet.kit.plugin import ControllerPlugin

PLUGIN = ControllerPlugin(
    name="sixth", plural=None, build=lambda options: None,
    register=lambda registry, controller: None, rules=lambda: (),
    objects="sixth_controller.objects:catalog_objects",
)
"""
SIXTH_OBJECTS = """
def catalog_objects(catalog, served):
    return [{"apiVersion": "example.io/v1", "kind": "Sixth",
             "metadata": {"name": m.name, "namespace": t.namespaces[0]}} for m, t in served]
"""


def test_a_sixth_controllers_objects_come_with_one_folder_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's objects are each controller's own (`objects` on its plug-in): a new
    controller's reach the renderer's and the Pulumi program's one assembler with no other
    change. Its package is written here, in a folder of its own."""
    package = tmp_path / "sixth_controller"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(SIXTH_PLUGIN)
    (package / "objects.py").write_text(SIXTH_OBJECTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog = load_catalog(REPO / "inferenceservices" / "catalog.yaml")
    paths = (*CONTROLLERS, "sixth_controller.plugin:PLUGIN")
    objects = catalog_objects(catalog, served(catalog), paths=paths)
    kinds = {o["kind"] for o in objects}
    assert {"CanaryPolicy", "AutoscalePolicy", "Tenant", "Sixth"} <= kinds, kinds
    sixth = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects
             if o["kind"] == "Sixth"]  # fmt: skip
    assert sixth == [(t.namespaces[0], m.name) for m, t in served(catalog)]
    without = catalog_objects(catalog, served(catalog))
    assert [o for o in objects if o["kind"] != "Sixth"] == without
