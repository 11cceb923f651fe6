"""Audit cases: small manifests a real cluster refuses or accepts, with the refusal expected.

One place for both judges: `tests/test_validate.py` runs every case through `radixfleet
validate`, and a test against a real cluster (KServe v0.20.0 and Knative Serving 1.21.1
webhooks) can apply the same manifests in the same order and expect the same outcome.

The cases live in `tests/data/audit_cases/*.yaml`, one file per group of upstream rules:

    rule: a name for the group
    refused_by: kserve-webhook | knative-webhook | kube-apiserver | radixfleet
    upstream: the upstream file and function at the version the rule was read from
    cases:
      - id: kebab-case, readable as a test id
        features: {config-features entries}    # optional; absent: radixfleet's (platform.py)
        refused_by: ...                         # optional; overrides the file's
        manifests:                              # applied in this order
          - base: a name from bases.yaml
            patch: {JSON merge patch, RFC 7386}  # optional
            set: {dotted.path[0].with: value}    # optional, after the patch
            delete: [dotted.path]                # optional, last
        refused: {object: Kind/name, field: dotted path, message: text in the refusal}
        # or
        accepted: true

`object` and `field` say where validate reports the cause; a cluster refuses the object that
carries it, or (Knative) the Knative Service KServe makes of the InferenceService.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from radixfleet.platform import KNATIVE_FEATURES

CASES_DIR = Path(__file__).resolve().parent / "data" / "audit_cases"
BASES_FILE = "bases.yaml"
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class Refusal:
    """Where validate reports the cause of a refusal, and text the refusal contains."""

    object: str
    field: str
    message: str


@dataclass(frozen=True)
class AuditCase:
    """One case: manifests in order, the cluster's features, and what must happen."""

    rule: str
    id: str
    refused_by: str
    upstream: str
    manifests: list[dict[str, Any]]
    features: dict[str, str] = field(default_factory=dict)
    refusal: Refusal | None = None

    @property
    def name(self) -> str:
        return f"{self.rule}/{self.id}"


def load_cases(folder: Path = CASES_DIR) -> list[AuditCase]:
    """Every case of every rule file in `folder`, with full manifests."""
    bases = yaml.safe_load((folder / BASES_FILE).read_text(encoding="utf-8"))
    cases: list[AuditCase] = []
    for path in sorted(folder.glob("*.yaml")):
        if path.name != BASES_FILE:
            cases.extend(_cases(yaml.safe_load(path.read_text(encoding="utf-8")), bases))
    return cases


def _cases(group: dict[str, Any], bases: dict[str, Any]) -> list[AuditCase]:
    out = []
    for raw in group["cases"]:
        if ("refused" in raw) == bool(raw.get("accepted")):
            raise ValueError(f"{group['rule']}/{raw['id']}: say either refused or accepted")
        refused = raw.get("refused")
        out.append(
            AuditCase(
                rule=group["rule"],
                id=raw["id"],
                refused_by=raw.get("refused_by", group["refused_by"]),
                upstream=group["upstream"],
                manifests=[_build(step, bases) for step in raw["manifests"]],
                features=dict(raw.get("features", KNATIVE_FEATURES)),
                refusal=Refusal(**refused) if refused else None,
            )
        )
    return out


def _build(step: dict[str, Any], bases: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(bases[step["base"]])
    doc = merge_patch(doc, step.get("patch", {}))
    for path, value in (step.get("set") or {}).items():
        _set(doc, path, copy.deepcopy(value))
    for path in step.get("delete") or []:
        _delete(doc, path)
    result: dict[str, Any] = doc
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _steps(path: str) -> list[str | int]:
    return [int(index) if index else key for key, index in _STEP.findall(path)]


def _set(doc: Any, path: str, value: Any) -> None:
    *parents, last = _steps(path)
    node = doc
    for step, following in zip(parents, [*parents[1:], last], strict=True):
        node = _child(node, step, [] if isinstance(following, int) else {})
    if isinstance(last, int):
        while len(node) <= last:
            node.append(None)
    node[last] = value


def _child(node: Any, step: str | int, empty: Any) -> Any:
    if isinstance(step, int):
        while len(node) <= step:
            node.append(copy.deepcopy(empty))
        return node[step]
    return node.setdefault(step, empty)


def _delete(doc: Any, path: str) -> None:
    *parents, last = _steps(path)
    node = doc
    for step in parents:
        node = node[step]
    del node[last]
