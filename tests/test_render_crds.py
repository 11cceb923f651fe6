"""deploy/crds/: the CRDs `radixfleet render` writes from the controllers' spec types, and
everything that installs or reads them taking that copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from infra import manifests as m
from infra.settings import StackSettings
from radixfleet.cli import app
from radixfleet.controllers.canary import spec as canary_spec
from radixfleet.kit.registry import crds, plugins
from radixfleet.render.crds import render_crds
from radixfleet.validate.crd_schema import CrdKey, crd_schemas

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "deploy" / "crds"
CATALOG = REPO / "inferenceservices" / "catalog.yaml"


def _committed() -> dict[str, Any]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(FOLDER.glob("*.yaml"))}


def test_committed_crds_are_what_render_produces(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "--catalog", str(CATALOG), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    fresh = {p.name: p.read_text() for p in (tmp_path / "deploy" / "crds").glob("*.yaml")}
    committed = {p.name: p.read_text() for p in FOLDER.glob("*.yaml")}
    assert fresh == render_crds()
    assert committed == fresh, "deploy/crds/ drifted: run `radixfleet render`"


def test_one_crd_per_custom_resource_and_kopfs_peering() -> None:
    names = {f"{p.plural}.radixfleet.io.yaml" for p in plugins() if p.plural is not None}
    assert set(_committed()) == names | {"clusterkopfpeerings.kopf.dev.yaml"}
    assert list(_committed().values()) == sorted(crds(), key=lambda c: c["metadata"]["name"])


def test_the_drift_test_sees_a_cel_rule_removed_from_a_spec_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rule dropped from the type must show as drift, not pass unnoticed.
    schema = canary_spec._STEPS.schema
    assert isinstance(schema, dict)
    monkeypatch.setitem(schema, "x-kubernetes-validations", schema["x-kubernetes-validations"][:1])
    assert render_crds() != {p.name: p.read_text() for p in FOLDER.glob("*.yaml")}


def test_infra_installs_the_rendered_crds() -> None:
    default = StackSettings.model_fields["crds_dir"].default
    assert (REPO / "infra" / default).resolve() == FOLDER
    assert m.load_crds(FOLDER) == list(_committed().values())


def test_validate_knows_every_custom_resource_of_radixfleet() -> None:
    schemas = crd_schemas()
    for crd in crds():
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            assert CrdKey(f"{group}/{version['name']}", kind) in schemas
