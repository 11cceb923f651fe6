"""The platform team's dashboards and Prometheus rules, as ConfigMaps and PrometheusRules
(rendered by `radixfleet render` into dashboards/).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from infra.manifests.addons import MONITORING_NAMESPACE
from infra.manifests.base import Manifest

DASHBOARD_FOLDER = "radixfleet"


def dashboard_files(directory: Path) -> list[Path]:
    """Grafana dashboard JSON files, in a stable order (none is fine)."""
    return sorted(directory.glob("**/*.json")) if directory.is_dir() else []


def prometheus_rules(directory: Path) -> list[Manifest]:
    """PrometheusRule objects for the rule files in `directory` (none is fine).

    PrometheusRule objects are taken as they are; bare rule files (`groups:` only, the form
    promtool reads) are wrapped, but only when the directory has no PrometheusRule objects, since
    generators may write both forms of the same rules.
    """
    objects, bare = [], []
    for path, index, doc in _yaml_documents(directory):
        if doc.get("kind") == "PrometheusRule":
            objects.append(_in_monitoring(doc))
        elif doc.get("groups") and "kind" not in doc:
            bare.append(_wrap_rules(k8s_name(path.stem, index), doc["groups"]))
    return objects or bare


def _yaml_documents(directory: Path) -> Iterator[tuple[Path, int, Manifest]]:
    if not directory.is_dir():
        return
    for path in sorted([*directory.glob("**/*.yaml"), *directory.glob("**/*.yml")]):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if isinstance(doc, dict):
                yield path, index, doc


def _in_monitoring(rule: Manifest) -> Manifest:
    metadata = {**rule["metadata"], "namespace": MONITORING_NAMESPACE}
    return {**rule, "metadata": metadata}


def _wrap_rules(name: str, groups: list[Manifest]) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": name, "namespace": MONITORING_NAMESPACE},
        "spec": {"groups": groups},
    }


def k8s_name(stem: str, index: int = 0) -> str:
    """A DNS-1123 object name from a file name (plus an index for the n-th document)."""
    base = "".join(c if c.isalnum() else "-" for c in stem.lower()).strip("-")[:50]
    return f"{base}-{index}" if index else base
