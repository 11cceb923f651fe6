"""The add-ons' CRDs against a real API server (apiextensions v0.37.2): accepted as they are.

The test server serves custom resources and CRDs only, so this checks the CRDs (structural
schemas, CEL rules, conversion settings); the built-in objects need the full test cluster.
A server-side dry run leaves the session's own CRDs as the fixture installed them.
"""

from __future__ import annotations

import datetime

import pytest
import yaml

from testbed.addons import KNATIVE_COMMANDS, render_addons
from tests.apiserver.fixture import FIELD_MANAGER, ApiServer

pytestmark = pytest.mark.apiserver

NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
IMAGES = {
    "kserve-manager": "localhost/radixfleet/kserve-manager:test",
    **{f"knative-{c}": f"localhost/radixfleet/knative-{c}:test" for c in KNATIVE_COMMANDS},
}


def test_every_crd_passes_a_server_side_dry_run(apiserver: ApiServer) -> None:
    objects = render_addons(IMAGES, modes=("Standard", "Knative"), now=NOW)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    result = apiserver.kubectl(
        "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
        "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(crds), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(crds), result.stdout
