"""What every controller's command line shares: its `run`, built from its plug-in, and `status`.

A `run` command's options are `Setting`s (`radixfleet.kit.settings`): the controller's own,
declared by its plug-in, then the kit's (namespaces, Prometheus, region, metrics port,
`--standalone`). Typer reads a command's options from its function's signature, so a `Command`
is a callable whose signature holds one typer option a setting (`inspect.signature` honours
`__signature__`: typer's public way in, no click internals). `radixfleet operator run`
(`radixfleet.kit.cli`) is built the same way from every plug-in's settings. `show_status`,
`print_lines` and `fail` are what the controllers' `status` commands print with. Imports only
typer and rich at the top: `radixfleet --help` stays fast.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Protocol, TypeVar

import typer
from rich.console import Console

from radixfleet.kit.settings import Setting

if TYPE_CHECKING:
    from radixfleet.kit.plugin import ControllerPlugin

console = Console()
err = Console(stderr=True)
EXIT_NOT_FOUND = 1

REGION = Setting("region", ("--region",), "The region label of exported metrics.", default="local")
PROMETHEUS = Setting("prometheus", ("--prometheus",), "Prometheus URL of the region.")
NAMESPACES = Setting("namespaces", ("--namespace", "-n"), "Watch only these.", repeatable=True)
METRICS_PORT = Setting("metrics_port", ("--metrics-port",), "Serve /metrics on this port.", int)
STANDALONE = Setting(
    "standalone", ("--standalone/--no-standalone",), "No peering: one replica only.", bool, False
)

Namespace = Annotated[str, typer.Option("--namespace", "-n", help="Its namespace.")]


# --- commands from settings -----------------------------------------------------------------


class Command:
    """A function typer makes a command of: an option a setting, its parameter named by the key
    in `options()`; called, it passes every value to `action` by that name. The settings and
    the help are found only when typer asks (it builds the command line when it runs), so a
    controller's cli.py names its plug-in by path and importing it loads no spec."""

    def __init__(
        self, action: Callable[[dict[str, Any]], None], *,
        options: Callable[[], Mapping[str, Setting]], help: Callable[[], str],
    ) -> None:  # fmt: skip
        self._action, self._options, self._help = action, options, help

    def __call__(self, **values: Any) -> None:
        self._action(values)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_option(setting),
                              annotation=_annotation(setting))
            for name, setting in self._options().items()
        ])  # fmt: skip

    # typer reads the parameters' types with `typing.get_type_hints` and the help with
    # `inspect.getdoc`: both look these attributes up, so properties answer them when asked.
    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        return self._help()


def _option(setting: Setting) -> Any:
    default = ... if setting.required else setting.default
    return typer.Option(default, *setting.flags, help=setting.help, envvar=setting.envvar)


def _annotation(setting: Setting) -> Any:
    kind: Any = types.GenericAlias(list, (setting.kind,)) if setting.repeatable else setting.kind
    return kind if setting.required or setting.default is not None else kind | None


def own_name(controller: str, setting: Setting) -> str:
    """The parameter a controller's setting takes in a command: apart from the kit's own."""
    return f"{controller}__{setting.key}".replace("-", "_")


def parsed(
    controller: str, settings: Sequence[Setting], values: Mapping[str, Any]
) -> dict[str, Any]:
    """A controller's settings as it uses them; a value its parser refuses is a usage error."""
    found = {}
    for setting in settings:
        try:
            found[setting.key] = setting.value(values[own_name(controller, setting)])
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint=setting.flags[0]) from None
    return found


# --- a controller's own `run` ---------------------------------------------------------------


def add_run(
    app: typer.Typer, plugin: str, *, help: str, shared: Sequence[Setting] = (),
    own: Sequence[Setting] | None = None, metrics_port: int | None = None,
) -> None:  # fmt: skip
    """Add `run` to a controller's `app`: its plug-in (at "module:attribute") alone under kopf,
    with its own settings (or `own`: the same keys spelled for this command), then the kit's
    `shared` ones, the metrics port and `--standalone`."""
    kit = [*shared, replace(METRICS_PORT, default=metrics_port), STANDALONE]

    def mine() -> tuple[Setting, ...]:
        return tuple(_plugin(plugin).settings if own is None else own)

    def options() -> dict[str, Setting]:
        name = _plugin(plugin).name
        return {own_name(name, s): s for s in mine()} | {s.key: s for s in kit}

    def alone(values: dict[str, Any]) -> None:
        found = _plugin(plugin)
        _run_alone(found, parsed(found.name, mine(), values), values)

    app.command("run")(Command(alone, options=options, help=lambda: help))


def _plugin(path: str) -> ControllerPlugin:
    from radixfleet.kit.registry import load

    return load(path)


def _run_alone(plugin: ControllerPlugin, settings: dict[str, Any], values: dict[str, Any]) -> None:
    from radixfleet.kit.operator import Ports, run
    from radixfleet.kit.plugin import OperatorOptions

    options = OperatorOptions(
        region=values.get("region", REGION.default), prometheus_url=values.get("prometheus"),
        settings={plugin.name: settings},
    )  # fmt: skip
    ports = Ports(liveness=None, readiness=None, metrics=values["metrics_port"])
    run([plugin], options=options, namespaces=values.get("namespaces") or (),
        standalone=values["standalone"], ports=ports)  # fmt: skip


# --- `status` -------------------------------------------------------------------------------

Recorded = TypeVar("Recorded")


class Policies(Protocol):
    """A controller's store of its custom resources, as `status` reads it."""

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


def show_status(
    ctx: typer.Context, *, kind: str, store: Callable[[Any], Policies], namespace: str,
    name: str, status_of: Callable[[dict[str, Any]], Recorded | None],
    describe: Callable[[Recorded], list[str]],
) -> None:  # fmt: skip
    """Print the status a policy of `kind` records, `describe`d; exit 1 if it is not found.
    The store is the one a test put in the context, else `store(api_client)`."""
    from radixfleet.kit.errors import KubeError

    policies: Policies = ctx.obj or _kube_store(store)
    try:
        policy = policies.get(namespace, name)
    except KubeError as error:
        fail(str(error))
    if policy is None:
        fail(f"{kind} {namespace}/{name} not found")
    recorded = status_of(policy)
    if recorded is None:
        console.print(f"{namespace}/{name}: no decision yet")
        return
    print_lines(describe(recorded))


def _kube_store(store: Callable[[Any], Policies]) -> Policies:
    from radixfleet.kit.kube import api_client

    return store(api_client())


def print_lines(lines: Sequence[str]) -> None:
    """Lines as they are: no highlighting, no wrapping (names and numbers copy cleanly)."""
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    """An error on stderr, and exit 1 (what a command looked for is not there)."""
    err.print(f"[red]error[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_NOT_FOUND)
