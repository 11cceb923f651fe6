"""A cluster taken down leaves nothing behind: no process, no mount, no network namespace, no
veth, no route, no cgroup. Checked on a cluster of its own (the session's keeps running)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import cluster as cluster_mod
from testbed import session
from testbed.cluster import Cluster
from testbed.layout import Layout
from tests.cluster.fixture import RUN_ROOT

pytestmark = pytest.mark.cluster


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args and str(os.getpid()) != cmdline.parent.name:
            found.append(f"{cmdline.parent.name}: {args}")
    return found


def _traces(layout: Layout) -> dict[str, object]:
    net = layout.network
    mounts = Path("/proc/self/mountinfo").read_text()
    return {
        "processes": _processes_mentioning(str(layout.run_dir)),
        "mounts": [line for line in mounts.splitlines() if str(layout.run_dir) in line],
        "netns": Path(f"/run/netns/{net.netns}").exists(),
        "veth": Path(f"/sys/class/net/{net.host_veth}").exists(),
        "cgroups": [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{net.cgroup}")],
        "etcd data": layout.etcd_dir.exists(),
    }


@pytest.fixture
def short_run_dir() -> Iterator[Path]:
    """A run folder as short as the session's (under an xdist worker, tmp_path is too long for
    containerd's socket paths: testbed.layout.socket_path_problem)."""
    folder = Path(tempfile.mkdtemp(prefix="radixfleet-teardown-", dir=RUN_ROOT))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_down_leaves_no_process_mount_namespace_or_cgroup(
    cluster: Cluster, short_run_dir: Path
) -> None:
    # The session's cluster proves the build and images are there; this one starts a second.
    second = session.start(short_run_dir / "second")
    layout = second.layout
    assert second.network.slot != cluster.network.slot
    running = _traces(layout)
    assert running["processes"] and running["netns"] and running["cgroups"], running
    cluster_mod.down(layout)
    assert _traces(layout) == {
        "processes": [],
        "mounts": [],
        "netns": False,
        "veth": False,
        "cgroups": [],
        "etcd data": False,
    }
    assert (layout.logs / "kubelet.log").is_file(), "logs are kept after teardown"
