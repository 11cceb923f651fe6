"""pytest plugin: one real Kubernetes cluster (testbed/) per test session, for the tests that need
a kubelet, webhooks, RBAC or admission: the ``cluster`` fixture.

The cluster is brought up on first use and taken down at the end of the session. Its logs (every
component's, in ``<run dir>/logs``) are kept when a test failed, and the path is printed; a
passing session deletes them. Tests that request the fixture get the ``cluster`` marker, so
``pytest -m "not cluster"`` leaves it unstarted. When it cannot be brought up, the fixture fails
under ``CI=true`` (CI must never pass by skipping what it was meant to test) and skips elsewhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURE_NAMES = frozenset({"cluster"})
RUN_ROOT = Path(os.environ.get("RADIXFLEET_CLUSTER_RUNS", "/var/tmp"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if FIXTURE_NAMES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[object]:
    from testbed import session  # the cluster's Python dependencies load only when used

    _sweep_stale()
    run_dir = RUN_ROOT / f"radixfleet-cluster-{os.getpid()}"
    try:
        running = session.start(run_dir)
        (run_dir / "owner.pid").write_text(str(os.getpid()))
    except session.UnavailableError as error:
        _unavailable(str(error), run_dir)
    try:
        yield running
    finally:
        session.stop(running)
        if request.session.testsfailed:
            print(f"\ncluster logs kept in {running.layout.logs}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


def _sweep_stale() -> None:
    """Take down clusters of test sessions that died without teardown (killed by a signal): the
    node's supervisor runs in a session of its own and would outlive them."""
    from testbed import cluster

    for run_dir in RUN_ROOT.glob("radixfleet-cluster-*"):
        try:
            owner = int((run_dir / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        layout = cluster.load_layout(run_dir)
        if layout is not None and not _alive(owner):
            cluster.down(layout)
            shutil.rmtree(run_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unavailable(reason: str, run_dir: Path) -> None:
    message = f"test cluster unavailable (logs in {run_dir / 'logs'}): {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
