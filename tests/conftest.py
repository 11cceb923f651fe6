"""Shared pytest setup: plugins that provide servers to the tests (each registers its fixtures),
and the grouping that lets ``make test`` run the suite on two workers (pytest-xdist).

The machine has one test bed: one cluster (fixed host ports: etcd, the API server, the kubelet)
and one containerd under runc for the image tests. Every test that uses it goes to one worker,
in one group (``--dist loadgroup``); the other worker takes the rest, test by test. Most of the
bed's time is spent waiting for Kubernetes, so the two halves overlap well on two cores.
"""

import pytest

pytest_plugins = [
    "tests.cluster.fixture",
]

TEST_BED_MARKERS = frozenset({"cluster", "images"})
TEST_BED_GROUP = "test-bed"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.cluster.fixture import FIXTURE_NAMES  # loaded (and rewritten) as a plugin by now

    for item in items:
        markers = {marker.name for marker in item.iter_markers()}
        uses_cluster = FIXTURE_NAMES & set(getattr(item, "fixturenames", ()))
        if uses_cluster or TEST_BED_MARKERS & markers:
            item.add_marker(pytest.mark.xdist_group(TEST_BED_GROUP))
