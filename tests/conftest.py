"""Shared pytest setup: plugins that provide servers to the tests (each registers its fixtures),
and the grouping that lets ``make test`` run the suite on two workers (pytest-xdist).

The session has one test cluster, started on first use (tests/cluster/fixture.py). Every test
that uses it goes to one worker, in one group (``--dist loadgroup``). A module that starts a
cluster of its own (marker ``own_cluster``: the Pulumi program's, from ``make cluster``) is a
group of its own: each cluster has its own network namespace and address slot
(testbed/layout.py), so it runs beside the session's, on the other worker. That worker takes the
rest test by test, the image tests too (their containerd is a throwaway of their own). Most of
a cluster's time is spent waiting for Kubernetes, so the two halves overlap well on two cores.
"""

import pytest

pytest_plugins = [
    "tests.cluster.fixture",
]

TEST_BED_GROUP = "test-bed"
OWN_CLUSTER_GROUP = "own-cluster"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.cluster.fixture import FIXTURE_NAMES  # loaded (and rewritten) as a plugin by now

    for item in items:
        markers = {marker.name for marker in item.iter_markers()}
        uses_cluster = FIXTURE_NAMES & set(getattr(item, "fixturenames", ()))
        if "own_cluster" in markers and not uses_cluster:
            item.add_marker(pytest.mark.xdist_group(OWN_CLUSTER_GROUP))
        elif uses_cluster or "cluster" in markers:
            item.add_marker(pytest.mark.xdist_group(TEST_BED_GROUP))
    items.sort(key=_turn)


def _turn(item: pytest.Item) -> int:
    """When a test's group is handed out (`make test` passes --no-loadscope-reorder, so xdist
    keeps this order; by default it hands out the largest groups first). The test bed first:
    it is the longest, alone on its worker. The Pulumi module last: on a fresh machine it waits
    for the Pulumi builds, which run in the background at idle priority (scripts/provision.sh),
    so the other worker runs the unit tests first. Handed out second, as xdist's reordering did,
    its worker sat idle for them while every unit test waited (20 minutes, cold runs of 6a1fa86
    and 739d600)."""
    group = item.get_closest_marker("xdist_group")
    name = (group.args[0] if group.args else group.kwargs.get("name")) if group else None
    return {TEST_BED_GROUP: 0, OWN_CLUSTER_GROUP: 2}.get(name, 1)
