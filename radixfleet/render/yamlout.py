"""Write Kubernetes objects as YAML with the comments that explain their choices.

Builders return plain dicts plus a map of `Notes`: a dotted path to a key (`spec.containers[0].
startupProbe`) and the comment to put above it. Keeping comments beside the data (and not in
templates) lets the same builders feed `kubectl`, Pulumi and the tests.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

Notes = Mapping[str, str]
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def to_yaml(obj: Mapping[str, Any], *, notes: Notes | None = None, header: str = "") -> str:
    """One YAML document for `obj`, with `notes` as comments above their keys."""
    doc = _commented(obj)
    for path, text in (notes or {}).items():
        _attach(doc, path, text)
    if header:
        doc.yaml_set_start_comment(header)
    out = io.StringIO()
    yaml = YAML()
    yaml.width = 4096  # never fold long strings such as command lines
    yaml.indent(mapping=2, sequence=2, offset=0)
    yaml.dump(doc, out)
    return out.getvalue()


def _commented(value: Any) -> Any:
    if isinstance(value, Mapping):
        return CommentedMap((k, _commented(v)) for k, v in value.items())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return CommentedSeq(_commented(v) for v in value)
    return value


def _attach(doc: CommentedMap, path: str, text: str) -> None:
    parts = [name or int(index) for name, index in _PART.findall(path)]
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[part]
    key = parts[-1]
    if key not in parent:
        raise KeyError(f"comment path {path!r} names no key")
    indent = 2 * _depth(parts)
    parent.yaml_set_comment_before_after_key(key, before=text, indent=indent)


def _depth(parts: Sequence[str | int]) -> int:
    # Mapping keys indent by one level each; sequence items add none of their own with offset 0.
    return sum(1 for p in parts[:-1] if isinstance(p, str))


def with_kustomization(files: dict[str, str], *, header: str) -> dict[str, str]:
    """`files` plus the kustomization.yaml that lists them all: a kustomize base."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    return {**files, "kustomization.yaml": to_yaml(kustomization, header=header)}
