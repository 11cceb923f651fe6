"""Check SGLang command lines against sglang 0.5.23's own flag list (`server-args.json`).

A flag the server does not know makes `launch_server` exit at start-up, on a GPU node, minutes
into a rollout; checking here moves that failure to `radixfleet validate`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

# KServe fills `{{.Name}}`-style placeholders in runtime arguments at deploy time.
TEMPLATE = re.compile(r"\{\{\s*\.[A-Za-z]+\s*\}\}")
HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgG]?$")
# argparse's own test: a token that begins with a dash is another flag unless it is a number.
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# The kubelet replaces `$(VAR)` with the container's environment before the process starts.
ENV_REFERENCE = re.compile(r"^\$\([A-Za-z_][A-Za-z0-9_]*\)")


@dataclass(frozen=True)
class Flag:
    """One sglang command-line option as argparse knows it."""

    dest: str
    takes_value: bool
    nargs: str | int | None
    type: str | None
    choices: tuple[str, ...] | None


@functools.cache
def sglang_flags() -> dict[str, Flag]:
    """Every flag spelling of `python -m sglang.launch_server`, mapped to its definition."""
    text = resources.files("radixfleet.schemas").joinpath("sglang/server-args.json").read_text()
    flags: dict[str, Flag] = {}
    for arg in json.loads(text)["arguments"]:
        choices = tuple(str(c) for c in arg["choices"]) if arg["choices"] else None
        flag = Flag(arg["dest"], arg["takes_value"], arg["nargs"], arg["type"], choices)
        for spelling in arg["flags"]:
            flags[spelling] = flag
    return flags


def check_args(args: Sequence[str]) -> Iterator[str]:
    """One message per unknown flag or invalid value in an sglang argument list."""
    flags = sglang_flags()
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            yield f"{token!r} is not a flag (values follow the flag they belong to)"
            continue
        name, _, inline = token.partition("=")
        flag = flags.get(name)
        if flag is None:
            yield f"unknown sglang flag {name}"
            continue
        attached = inline if "=" in token else None
        values, i = _values(flag, args, i, attached)
        for value in values:
            problem = _check_value(flag, value)
            if problem:
                yield f"{name} {value!r}: {problem}"
            elif attached is None and ENV_REFERENCE.match(value):
                # A value from the environment (a Secret's key, say) may begin with a dash,
                # which SGLang's argparse would read as the next flag and exit.
                yield f"{name} {value!r}: give a value from the environment as {name}={value}"
        if flag.takes_value and not values and flag.nargs not in ("*", "?"):
            yield f"{name} needs a value"


def parse_args(args: Sequence[str]) -> dict[str, list[str]]:
    """The flags of a valid sglang argument list (see ``check_args``) with their values, keyed
    by the flag's destination (``--tp`` and ``--tp-size`` are both ``tp_size``)."""
    flags = sglang_flags()
    parsed: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        flag = flags[name]
        values, i = _values(flag, args, i + 1, inline if eq else None)
        parsed[flag.dest] = values
    return parsed


def first_value(flags: Mapping[str, list[str]], dest: str) -> str | None:
    """The value of the flag `dest` in `parse_args`'s answer; None when absent or valueless."""
    values = flags.get(dest)
    return values[0] if values else None


def _values(flag: Flag, args: Sequence[str], i: int, inline: str | None) -> tuple[list[str], int]:
    if not flag.takes_value:
        return ([inline] if inline is not None else []), i
    if inline is not None:
        return [inline], i
    if flag.nargs in ("*", "+"):
        start = i
        while i < len(args) and not _flag_like(args[i]):
            i += 1
        return list(args[start:i]), i
    if i < len(args) and not _flag_like(args[i]):
        return [args[i]], i + 1
    return [], i


def _flag_like(token: str) -> bool:
    """Whether argparse would take `token` for a flag rather than a value."""
    return token.startswith("-") and not NEGATIVE_NUMBER.match(token)


def _check_value(flag: Flag, value: str) -> str | None:
    if not flag.takes_value:
        return "takes no value"
    if TEMPLATE.search(value):
        return None if flag.type in (None, "str") else f"a template cannot be a {flag.type}"
    if flag.choices and value not in flag.choices:
        return f"not one of {', '.join(flag.choices)}"
    return _check_type(flag.type, value)


def _check_type(kind: str | None, value: str) -> str | None:
    parsers: dict[str, Any] = {"int": int, "float": float}
    if kind in parsers:
        try:
            parsers[kind](value)
        except ValueError:
            return f"not a valid {kind}"
    if kind == "human_readable_int" and not HUMAN_INT.match(value):
        return "not a number (like 8192 or 128k)"
    return None


# -- LoRA adapters a command line preloads ------------------------------------------------------

LORA_PATHS = "--lora-paths"


@dataclass(frozen=True)
class LoraPathEntry:
    """One `--lora-paths` entry: the adapter's name, where its weights are, whether pinned."""

    name: str
    path: str
    pinned: bool = False


def lora_path_entry(spec: str) -> LoraPathEntry:
    """One `--lora-paths` entry as sglang 0.5.23 reads it: `NAME=PATH`, a JSON object with
    `lora_name`, `lora_path` and `pinned`, or a bare path (named by the path); ValueError
    saying which entry when a JSON one names no adapter."""
    if spec.lstrip().startswith("{"):
        try:
            entry = json.loads(spec)
        except json.JSONDecodeError:
            entry = None
        name = entry.get("lora_name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"--lora-paths: {spec!r} is not a JSON object with a lora_name")
        assert isinstance(entry, dict)
        path, pinned = entry.get("lora_path", name), entry.get("pinned", False)
        return LoraPathEntry(name=name, path=str(path), pinned=bool(pinned))
    name, equals, path = spec.partition("=")
    return LoraPathEntry(name=name, path=path) if equals else LoraPathEntry(name=spec, path=spec)


def lora_path_specs(args: Sequence[str]) -> list[str]:
    """The `--lora-paths` entries of an sglang argument list, in order, as written (every
    occurrence's: argparse's `nargs='*'` takes the values up to the next flag). Unlike
    `parse_args`, any other flag may be unknown: this reads a list no check has passed."""
    specs: list[str] = []
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        i += 1
        if name != LORA_PATHS:
            continue
        if eq:
            specs.append(inline)
            continue
        while i < len(args) and not _flag_like(args[i]):
            specs.append(args[i])
            i += 1
    return specs
