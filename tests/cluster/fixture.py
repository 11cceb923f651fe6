"""pytest plugin: one real Kubernetes cluster (testbed/) per test session, the one way the tests
talk to Kubernetes. Fixtures, each building on the one before:

- ``cluster``: the one-node cluster (API server with RBAC and admission, kubelet, CoreDNS);
- ``platform_crds``: the same, with radixfleet's CRDs and kopf's peering CRD installed;
- ``kube_client``: a ``kubernetes`` client for it, as its administrator;
- ``kserve``: the same cluster with KServe (both deployment modes) and Knative Serving;
- ``namespace``: a fresh Namespace for one test, deleted after it;
- ``cluster_for_people``: another cluster, started as ``make cluster`` starts one, for the
  modules marked ``own_cluster``.

The cluster is brought up on first use and taken down at the end of the session. Its logs (every
component's, in ``<run dir>/logs``) are kept when a test failed, and the path is printed; a
passing session deletes them. Tests that request either fixture get the ``cluster`` marker, so
``pytest -m "not cluster"`` leaves it unstarted. When it cannot be brought up, the fixture fails
under ``CI=true`` (CI must never pass by skipping what it was meant to test) and skips elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURE_NAMES = frozenset({"cluster", "platform_crds", "kube_client", "kserve", "namespace"})
REPO = Path(__file__).resolve().parents[2]
RUN_ROOT = Path(os.environ.get("RADIXFLEET_CLUSTER_RUNS", "/var/tmp"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if FIXTURE_NAMES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[object]:
    _sweep_stale()
    with own_cluster(request, name=None) as running:
        yield running


@pytest.fixture(scope="session")
def platform_crds(cluster: Any) -> Any:
    """The session's cluster with radixfleet's CRDs (and kopf's peering CRD) installed."""
    from testbed import session

    session.install_radixfleet_crds(cluster)
    return cluster


@pytest.fixture(scope="session")
def kube_client(platform_crds: Any) -> Iterator[Any]:
    """A ``kubernetes.client.ApiClient`` for the session's cluster, as its administrator."""
    from kubernetes import config

    api_client = config.new_client_from_config(str(platform_crds.kubeconfig))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture(scope="session")
def kserve(platform_crds: Any) -> Iterator[Any]:
    """The session's cluster with radixfleet's CRDs, KServe in both deployment modes (the default
    the platform's, Knative: an InferenceService asks for Standard by annotation) and Knative
    Serving with the platform's config-features. Knative's networking layer is the test helper
    `testbed.fake_kingress` (KIngresses marked ready, nothing routed by host name): no real one
    can be built here (testbed/NETWORKING.md)."""
    with serving_platform(platform_crds):
        yield platform_crds


@contextlib.contextmanager
def serving_platform(running: Any) -> Iterator[None]:
    """The platform infra installs (KServe from its charts with infra's values: the
    platform's default mode, Knative; Standard by annotation; Knative Serving with the
    platform's config-features) on `running`, its KIngresses marked ready while the block
    runs."""
    from testbed import session

    session.install_platform(running)
    with session.kingresses_marked_ready(running):
        yield


@contextlib.contextmanager
def own_cluster(request: pytest.FixtureRequest, *, name: str | None) -> Iterator[Any]:
    """A cluster of this session's, taken down after the block: the session's one (`name`
    None), or one beside it for a module that must start from an empty cluster (nothing other
    modules left behind). Its logs are kept when a test of the session has failed."""
    from testbed import session  # the cluster's Python dependencies load only when used

    run_dir = RUN_ROOT / "-".join(p for p in ("radixfleet-cluster", str(os.getpid()), name) if p)
    try:
        running = session.start(run_dir)
        (run_dir / "owner.pid").write_text(str(os.getpid()))  # swept if this session dies
    except session.UnavailableError as error:
        _unavailable(str(error), run_dir)
    try:
        yield running
    finally:
        session.stop(running)
        _keep_logs_only(run_dir, failed=bool(request.session.testsfailed))


@pytest.fixture(scope="session")
def cluster_for_people(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A second cluster, as `make cluster` leaves one (KServe and Knative, nothing of ours), for
    the modules that deploy radixfleet as a team would: the Pulumi program's and the README's
    kubectl path. They run one after the other on one worker (marker ``own_cluster``), and each
    removes what it deployed, as its test of removal proves."""
    with made_for_people(request, name="people") as running:
        yield running


@contextlib.contextmanager
def made_for_people(request: pytest.FixtureRequest, *, name: str) -> Iterator[Any]:
    """A cluster beside the session's, started as `make cluster` starts one (`python -m
    testbed up`: the platform on it, the KIngress marker beside it) and taken down as `make
    cluster-down` does; the block fails if either command does. Its logs are kept when a test
    of the session has failed."""
    from testbed.cluster import Cluster, load_layout

    run_dir = RUN_ROOT / f"radixfleet-cluster-{os.getpid()}-{name}"
    up = _testbed_command("up", run_dir)
    layout = load_layout(run_dir)
    if up.returncode != 0 or layout is None:
        if layout is not None:
            _testbed_command("down", run_dir)
        _unavailable(up.stderr.strip() or up.stdout, run_dir)
    assert layout is not None
    (run_dir / "owner.pid").write_text(str(os.getpid()))  # swept if this session dies
    try:
        yield Cluster(layout)
    finally:
        down = _testbed_command("down", run_dir)
        assert down.returncode == 0, down.stderr
        _keep_logs_only(run_dir, failed=bool(request.session.testsfailed))


# What a stopped cluster's folder keeps after a failed session: what says what happened. The
# rest (containerd's images and snapshots, 2.4-2.7 GB a cluster) went on filling the disk.
KEPT_AFTER_A_FAILURE = ("logs", "pod-logs", "kubeconfig", "images.env", "layout.json", "owner.pid")


def _keep_logs_only(run_dir: Path, *, failed: bool) -> None:
    """After a stopped cluster: its folder gone, or, when a test of the session failed, only its
    logs kept (until the next session's sweep)."""
    if not failed:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for path in run_dir.iterdir():
        if path.name in KEPT_AFTER_A_FAILURE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    print(f"\ncluster logs kept in {run_dir / 'logs'} and {run_dir / 'pod-logs'}")


def _testbed_command(command: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "testbed", command, "--out", str(run_dir)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)


@pytest.fixture
def namespace(platform_crds: Any) -> Iterator[str]:
    """A Namespace of its own for one test (objects of different tests never meet); deleted
    after the test without waiting for its contents to go."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    platform_crds.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        platform_crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _sweep_stale() -> None:
    """Take down clusters of test sessions that died without teardown (killed by a signal): the
    node's supervisor runs in a session of its own and would outlive them. Remove the folders
    of earlier sessions' clusters, whose logs were kept after a failure."""
    from testbed import cluster

    for run_dir in RUN_ROOT.glob("radixfleet-cluster-*"):
        try:
            owner = int((run_dir / "owner.pid").read_text())
        except (OSError, ValueError):
            # Killed while the cluster started, before owner.pid was written: the folder is
            # named after the session's process.
            suffix = run_dir.name.removeprefix("radixfleet-cluster-")
            if not suffix.isdigit():
                continue
            owner = int(suffix)
        if _alive(owner):
            continue
        layout = cluster.load_layout(run_dir)
        if layout is not None:
            cluster.down(layout)
        elif not (run_dir / "owner.pid").exists():
            continue  # no record of what runs there to stop it by: left alone, as before
        # Without a layout but with an owner: taken down already (`testbed down` removes the
        # layout), its logs kept after a failed session; they go now.
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
