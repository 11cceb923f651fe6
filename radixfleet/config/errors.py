"""Configuration errors that name the file, the entry and the field of every problem."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A broken rule as the cross-entry checks find it: (location, message); the loader adds the file.
Finding = tuple[str, str]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration file, located by a dotted path like `models[2].name`."""

    file: str
    location: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.location}" if self.location else self.file
        return f"{where}: {self.message}"


class ConfigError(Exception):
    """A configuration file that cannot be used; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def format_location(loc: Sequence[str | int]) -> str:
    """Turn a pydantic-style location tuple into `models[2].tensor_parallel`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def not_utf8(exc: UnicodeDecodeError) -> str:
    """A decoding failure as one line that says where: `not UTF-8 text (byte 22 is 0xff)`."""
    return f"not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})"
