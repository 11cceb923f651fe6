"""The registry of controllers: plug-ins found by import path, and the kernel importing none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kopf
import pytest

from radixfleet.config import load_catalog
from radixfleet.config.serving import served
from radixfleet.kit.plugin import ControllerPlugin, Deferred
from radixfleet.kit.plugin import resolve as resolve_path
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
    assert [p.name for p in found] == [
        "canary",
        "autoscale",
        "quota",
        "failover",
        "routers",
        "lora",
    ]
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


@pytest.mark.parametrize("plugin", plugins(), ids=lambda p: p.name)
def test_each_plugins_deferred_parts_name_what_exists(plugin: ControllerPlugin) -> None:
    """What a plug-in names without importing (its Kubernetes-backed controller, its kopf
    registration, its rules) imports and is there: `build` runs only in a cluster otherwise."""
    parts = [v for v in vars(plugin).values() if isinstance(v, Deferred)]
    assert {"build", "register", "rules"} <= {k for k, v in vars(plugin).items() if v in parts}
    for part in parts:
        found = resolve_path(part.path)
        assert callable(found) if part.call else found is not None, part.path


def test_the_canary_plugs_into_the_twin_like_the_others() -> None:
    assert twin_policy("canary", "radixfleet") == "radixfleet.controllers.canary.twin:radixfleet"
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


# A sixth controller, whole: its plug-in, command line, setting, handlers, RBAC, catalog objects
# and a twin policy, in a package of its own written by the test.
SIXTH_PACKAGE = {
    "__init__.py": "",
    "plugin.py": """
import kopf
from radixfleet.kit.plugin import ControllerPlugin
from radixfleet.kit.rbac import PolicyRule
from radixfleet.kit.settings import Setting

def _register(registry, controller):
    kopf.on.event("example.io", "v1", "sixths", id="sixth-wake", registry=registry)(
        lambda **_: None)

GREETING = Setting("greeting", ("--sixth-greeting",), "What the sixth says.", default="hello")

PLUGIN = ControllerPlugin(
    name="sixth", plural="sixths", build=lambda options: object(), register=_register,
    rules=lambda: (PolicyRule(("example.io",), ("sixths",), ("get", "list", "watch")),),
    cli="sixth_controller.cli:app", objects="sixth_controller.objects:catalog_objects",
    twin={"canary": {"sixth": "sixth_controller.twin:policy"}}, settings=(GREETING,),
)
""",
    "cli.py": """
import typer
from radixfleet.kit.commands import add_run
app = typer.Typer()
add_run(app, "sixth_controller.plugin:PLUGIN", help="Run the sixth alone.")

@app.command()
def hello() -> None:
    typer.echo("the sixth controller says hello")

@app.command()
def status() -> None:
    typer.echo("nothing to report")
""",
    "objects.py": """
def catalog_objects(catalog, served):
    return [{"apiVersion": "example.io/v1", "kind": "Sixth",
             "metadata": {"name": m.name, "namespace": t.namespaces[0]}} for m, t in served]
""",
    "twin.py": "def policy(*args, **kwargs):\n    return None\n",
}

# Run in its own interpreter: the command line is assembled when radixfleet.cli is imported.
SIXTH_PROBE = """
import json, pathlib, sys
sys.path.insert(0, sys.argv[1])
from radixfleet.kit import registry
registry.CONTROLLERS = (*registry.CONTROLLERS, "sixth_controller.plugin:PLUGIN")  # the one line

from typer.testing import CliRunner
from radixfleet.cli import app
from radixfleet.config import load_catalog
from radixfleet.config.serving import served
from radixfleet.kit.operator import build_registry
from radixfleet.render.operator import operator_rules
from radixfleet.twin.registry import resolve

from radixfleet.kit import operator
given = []
operator.run = lambda plugins, *, options, **_: given.append(
    [[p.name for p in plugins], dict(options.settings["sixth"])])  # runs no kopf here
runner = CliRunner()
runner.invoke(app, ["operator", "run", "--sixth-greeting", "hi"])
runner.invoke(app, ["sixth", "run"])

plugins = registry.selected()
controllers = {p.name: object() for p in plugins}  # handlers are never called here
kopf_registry = build_registry(plugins, controllers, peering=None, priority=1)
catalog = load_catalog(pathlib.Path("inferenceservices/catalog.yaml"))
print(json.dumps({
    "said": runner.invoke(app, ["sixth", "hello"]).output,
    "operator_help": runner.invoke(app, ["operator", "run", "--help"]).output,
    "own_help": runner.invoke(app, ["sixth", "run", "--help"]).output,
    "given": given,
    "selected": [p.name for p in plugins],
    "watches": sorted(h.id for h in kopf_registry._watching.get_all_handlers()),
    "rules": [list(r.resources) for r in operator_rules() if "example.io" in r.api_groups],
    "objects": [(o["metadata"]["namespace"], o["metadata"]["name"])
                for o in registry.catalog_objects(catalog, served(catalog))
                if o["kind"] == "Sixth"],
    "expected": [(t.namespaces[0], m.name) for m, t in served(catalog)],
    "twin": resolve("canary", "sixth").__module__,
}))
"""


def test_a_sixth_controller_is_one_folder_and_one_registry_line(tmp_path: Path) -> None:
    """A controller written in a folder of its own and added to the registry by one line runs
    in the operator (its handlers), is allowed what it declares (the operator's ClusterRole),
    has its command (`radixfleet sixth ...`, with a `run` the kit builds), owns its settings
    (an option of `radixfleet operator run` and of its own `run`, its value handed to it alone),
    renders its catalog objects (the renderer's and the Pulumi program's one assembler) and
    offers its twin policy: nothing else changes."""
    package = tmp_path / "sixth_controller"
    package.mkdir()
    for name, text in SIXTH_PACKAGE.items():
        (package / name).write_text(text)
    probe = [sys.executable, "-c", SIXTH_PROBE, str(tmp_path)]
    ran = subprocess.run(probe, cwd=REPO, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert found["said"].strip() == "the sixth controller says hello"
    assert "--sixth-greeting" in found["operator_help"] and "--sixth-greeting" in found["own_help"]
    assert found["given"] == [
        [["canary", "autoscale", "quota", "routers", "sixth"], {"greeting": "hi"}],
        [["sixth"], {"greeting": "hello"}],
    ]
    assert found["selected"] == ["canary", "autoscale", "quota", "routers", "sixth"]
    assert "sixth-wake" in found["watches"] and "routers-wake-inferenceservices" in found["watches"]
    assert found["rules"] == [["sixths"]]
    assert found["objects"] == found["expected"] != []
    assert found["twin"] == "sixth_controller.twin"


def test_the_catalogs_objects_are_the_controllers_own_in_registry_order() -> None:
    """What a catalog renders beside its InferenceServices is each plug-in's `objects`."""
    catalog = load_catalog(REPO / "inferenceservices" / "catalog.yaml")
    objects = catalog_objects(catalog, served(catalog))
    kinds = [o["kind"] for o in objects]
    assert {"CanaryPolicy", "AutoscalePolicy", "Tenant"} <= set(kinds), kinds
    by_plugin = [catalog_objects(catalog, served(catalog), paths=[path]) for path in CONTROLLERS]
    assert objects == [o for found in by_plugin for o in found]
