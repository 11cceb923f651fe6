"""The charts infra installs, rendered by Helm itself with infra's values (testbed/charts.py):
what the chart makes of the values, where reading the values alone cannot tell.

KServe v0.20.0's `kserve-localmodel-resources` deep-merges the values' agent nodeSelector into
a base DaemonSet that already selects `kserve/localmodel: worker`, so a selector of our own
could only add to KServe's: the agent then selected two labels, the GPU nodes carried one, and
the agent ran nowhere (every cached model mounted an empty folder).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from infra import manifests
from infra.testing import example_config
from radixfleet import labels
from radixfleet.config import GpuPool, load_catalog
from testbed import charts

pytestmark = pytest.mark.helm

EXAMPLE = Path(__file__).resolve().parent.parent / "inferenceservices" / "catalog.yaml"


@pytest.fixture(scope="module")
def agent() -> dict[str, Any]:
    """KServe's node agent DaemonSet as infra's release of the chart creates it."""
    objects = charts.render(
        charts.kserve_chart("kserve-localmodel-resources"),
        manifests.kserve_localmodel_values(),
        release="kserve-localmodel-resources",
        namespace="kserve",
        kube_version=example_config()["radixfleet:cluster"]["kubernetesVersion"],
    )
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def _pools(*, caching: bool) -> list[GpuPool]:
    catalog = load_catalog(EXAMPLE)
    found = [p for r in catalog.regions for p in r.gpu_pools if bool(p.model_cache_gib) == caching]
    assert found, f"the example catalog has {'caching' if caching else 'non-caching'} pools"
    return found


def _selects(selector: Mapping[str, str], node: Mapping[str, str]) -> bool:
    return all(node.get(key) == value for key, value in selector.items())


def test_kserves_node_agent_runs_on_the_gpu_nodes_of_caching_pools(agent: dict[str, Any]) -> None:
    for pool in _pools(caching=True):
        node = manifests.gpu_node_labels(pool)
        assert _selects(agent["nodeSelector"], node), (pool.name, agent["nodeSelector"], node)
    assert labels.gpu_toleration() in agent["tolerations"]


def test_kserves_node_agent_stays_off_the_other_gpu_nodes(agent: dict[str, Any]) -> None:
    for pool in _pools(caching=False):
        node = manifests.gpu_node_labels(pool)
        assert not _selects(agent["nodeSelector"], node), (pool.name, node)
