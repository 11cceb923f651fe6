"""Write Kubernetes objects as YAML with the comments that explain their choices.

Builders return plain dicts plus a map of `Notes`: a dotted path to a key (`spec.containers[0].
startupProbe`) and the comment to put above it. Keeping comments beside the data (and not in
templates) lets the same builders feed `kubectl`, Pulumi and the tests.

The output is PyYAML's block style (two-space indent, sequences level with their key), written
here rather than by a YAML library's emitter for speed: a 10,000-model catalog is 20,000 files,
and ruamel's round-trip emitter needed a minute for them. Only the scalars go through a real
dumper (libyaml's, cached: keys and most values repeat), so quoting is always the library's:
`'true'`, `'1'`, `'0o17'`, `'x: y'` stay strings for any YAML reader.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

Notes = Mapping[str, str]
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_INDENT = "  "
_WIDTH = 4096  # fold nothing a manifest holds (command lines, PromQL)
_NO_FOLDING = 1 << 30
_LONGEST_KEY = 1000
_SEQUENCES = (list, tuple)
_Lines = list[str]


class ScalarDumper(yaml.CSafeDumper):
    """PyYAML's C dumper, quoting the strings a YAML 1.2 reader would read as numbers too:
    `0o17` is an octal integer there and a plain string to YAML 1.1."""


ScalarDumper.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^0o[0-7]+$"), list("0"))


def to_yaml(obj: Mapping[str, Any], *, notes: Notes | None = None, header: str = "") -> str:
    """One YAML document for `obj`, with `notes` as comments above their keys."""
    placed = {_locate(obj, path): text for path, text in (notes or {}).items()}
    lines = _comment(header, "") + (_mapping(obj, "", placed) if obj else ["{}"])
    return "\n".join(lines) + "\n"


def _locate(doc: Mapping[str, Any], path: str) -> tuple[int, str]:
    """The mapping (by identity) and the key that a note's `path` names."""
    parts = [name or int(number) for name, number in _PART.findall(path)]
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[part]
    key = parts[-1]
    if not isinstance(parent, Mapping) or key not in parent:
        raise KeyError(f"comment path {path!r} names no key")
    return id(parent), str(key)


def _mapping(value: Mapping[Any, Any], pad: str, notes: Mapping[tuple[int, str], str]) -> _Lines:
    lines: _Lines = []
    inner = pad + _INDENT
    for key, item in value.items():
        if notes and (id(value), key) in notes:
            lines += _comment(notes[id(value), key], pad)
        head = pad + _key(key) + ":"
        if isinstance(item, dict) and item:
            lines.append(head)
            lines += _mapping(item, inner, notes)
        elif isinstance(item, _SEQUENCES) and item:
            lines.append(head)
            lines += _sequence(item, pad, notes)  # level with its key, as PyYAML writes it
        else:
            lines.append(head + " " + _inline(item))
    return lines


def _sequence(value: Sequence[Any], pad: str, notes: Mapping[tuple[int, str], str]) -> _Lines:
    lines: _Lines = []
    inner = pad + _INDENT
    for item in value:
        if isinstance(item, dict) and item:
            lines += _dash(_mapping(item, inner, notes), pad)
        elif isinstance(item, _SEQUENCES) and item:
            lines += _dash(_sequence(item, inner, notes), pad)
        else:
            lines.append(pad + "- " + _inline(item))
    return lines


def _dash(block: _Lines, pad: str) -> _Lines:
    # The item's first line (after any comment above it) starts with the dash.
    first = next(i for i, line in enumerate(block) if not line.lstrip().startswith("#"))
    indent = len(pad) + len(_INDENT)
    block[first] = f"{pad}- {block[first][indent:]}"
    return block


def _inline(value: Any) -> str:
    # Concrete types, not the ABCs: an ABC check costs a microsecond, millions of times for
    # 10,000 models. Builders make dicts, lists and tuples; anything else is a scalar.
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, _SEQUENCES):
        return "[]"
    return _scalar(value)


def _key(key: Any) -> str:
    # String keys repeat (every manifest's `metadata`, `spec`, ...): cached. Not others, as a
    # cache takes 0.0 and -0.0 for one key.
    return _text_key(key) if type(key) is str else _checked_key(key)


@functools.lru_cache(maxsize=1 << 14)
def _text_key(key: str) -> str:
    return _checked_key(key)


def _checked_key(key: Any) -> str:
    text = _scalar(key)
    if len(text) > _LONGEST_KEY:  # YAML reads an implicit key of at most 1,024 characters
        raise ValueError(f"a key of {len(text)} characters cannot be written: {text[:40]}...")
    return text


def _scalar(value: Any) -> str:
    # Cached, as keys and most values repeat; but 0.0 and -0.0 are one key to a cache.
    return _format(value) if isinstance(value, float) else _cached(value)


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _cached(value: Any) -> str:
    return _format(value)


def _format(value: Any) -> str:
    text = _dump(value, style=None)
    if len(text.splitlines()) > 1:  # line breaks (U+2028 is one to YAML too), or folded:
        text = _dump(value, style='"')  # one double-quoted line, every break escaped
    return text


def _dump(value: Any, *, style: str | None) -> str:
    width = _WIDTH if style is None else _NO_FOLDING
    text: str = yaml.dump(value, Dumper=ScalarDumper, width=width, allow_unicode=True,
                          default_style=style)  # fmt: skip
    return text.removesuffix("\n").removesuffix("\n...")


def _comment(text: str, pad: str) -> _Lines:
    return [f"{pad}# {line}".rstrip() for line in text.splitlines()]


def with_kustomization(files: dict[str, str], *, header: str) -> dict[str, str]:
    """`files` plus the kustomization.yaml that lists them all: a kustomize base."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    return {**files, "kustomization.yaml": to_yaml(kustomization, header=header)}
