"""The add-ons' CRDs on the test cluster's API server (1.35): accepted as they are (structural
schemas, CEL rules, conversion settings), fast, before anything is installed from them. A
server-side dry run leaves the CRDs the session installed as they are."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from testbed import charts, knative, kserve
from testbed.cluster import Cluster
from testbed.session import cert_manager_crds


def _knative() -> list[dict[str, Any]]:
    """The operator chart's CRDs, and those of the Serving release the operator installs."""
    images = {key: f"localhost/radixfleet/{key}:test" for key in knative.image_keys()}
    operator = charts.render(knative.operator_chart(), knative.operator_values(images),
                             release=knative.OPERATOR_RELEASE,
                             namespace=knative.OPERATOR_NAMESPACE, kube_version="1.35")  # fmt: skip
    version = knative.release(knative.module_version())
    crds = knative.kodata().path() / "knative-serving" / version / "1-serving-crds.yaml"
    serving = [doc for doc in yaml.load_all(crds.read_text(),
                                            Loader=knative.LOADER) if doc]  # fmt: skip
    return operator + serving


def _kserve() -> list[dict[str, Any]]:
    return [obj for name in ("kserve-crd", "kserve-localmodel-crd")
            for obj in charts.render(charts.kserve_chart(name), {}, release=name,
                                     namespace=kserve.NAMESPACE, kube_version="1.35")]  # fmt: skip


@pytest.mark.parametrize("add_on", ["knative", "kserve", "cert-manager"])
def test_every_crd_passes_a_server_side_dry_run(cluster: Cluster, add_on: str) -> None:
    objects = {"knative": _knative, "kserve": _kserve, "cert-manager": cert_manager_crds}[add_on]()
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert crds
    result = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=radixfleet-tests",
        "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(crds), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(crds), result.stdout
