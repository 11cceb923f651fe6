"""The add-ons' CRDs on the test cluster's API server (1.37): accepted as they are (structural
schemas, CEL rules, conversion settings), fast, before anything is installed from them. A
server-side dry run leaves the CRDs the session installed as they are.
"""

from __future__ import annotations

import datetime

import yaml

from testbed.addons import KNATIVE_COMMANDS, render_addons
from testbed.cluster import Cluster

NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
IMAGES = {
    "kserve-manager": "localhost/radixfleet/kserve-manager:test",
    **{f"knative-{c}": f"localhost/radixfleet/knative-{c}:test" for c in KNATIVE_COMMANDS},
}


def test_every_crd_passes_a_server_side_dry_run(cluster: Cluster) -> None:
    objects = render_addons(IMAGES, modes=("Standard", "Knative"), now=NOW)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    result = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=radixfleet-tests",
        "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(crds), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(crds), result.stdout
