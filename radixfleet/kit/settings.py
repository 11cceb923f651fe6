"""A command-line setting as data: an option a controller (or the kit) asks for, without typer.

A controller's plug-in lists the settings it owns (the failover's region clusters, the routers'
image); `radixfleet.kit.commands` makes them options of `radixfleet operator run` and of the
controller's own `run`, and their values reach the controller as
`OperatorOptions.settings[controller][key]`, read back with `OperatorOptions.setting`. Declared
as data, they keep a plug-in cheap to load and the kit ignorant of any one controller's options.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One option. `key` names its value (a Python identifier); `flags` are its spellings on
    the command line (`--failover-context`, or click's `--x/--no-x` for a switch); `kind` is
    its type (str, int, float or bool: a bool is a switch), a list of them if `repeatable`;
    `envvar` is read when the option is not given. `parse` turns what was given into what the
    controller uses (it raises ValueError on the user's mistake: a usage error, not a crash);
    `required` asks for it (a controller's own `run` may, where the operator runs without it).
    """

    key: str
    flags: tuple[str, ...]
    help: str
    kind: type = str
    default: Any = None
    envvar: str | None = None
    repeatable: bool = False
    required: bool = False
    parse: Callable[[Any], Any] | None = None

    def value(self, given: Any) -> Any:
        """What the controller uses for `given`: a repeatable one as a list (none given: [])."""
        if self.repeatable:
            given = list(given or ())
        return given if self.parse is None else self.parse(given)
