"""Children never outlive the fleet: stopped explicitly, when the parent gets SIGTERM, and (by
the kernel's parent-death signal) when the parent is killed outright. Grandchildren included."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from radixfleet.localfleet.procs import Supervisor, free_ports, processes_with_marker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A child that starts a grandchild, so stopping must reach the whole process group.
FAMILY = ["sh", "-c", "sleep 60 & sleep 60"]

PARENT = """
import sys, time
from pathlib import Path
from radixfleet.localfleet.procs import Supervisor
supervisor = Supervisor(marker=sys.argv[1])
supervisor.install_signal_handlers()
try:
    supervisor.spawn("family", {family!r}, log_path=Path(sys.argv[2]))
    print("ready", flush=True)
    while True:
        time.sleep(0.1)
finally:
    supervisor.close(grace_s=1.0)
"""


def wait_gone(marker: str, *, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := processes_with_marker(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def wait_count(marker: str, count: int, *, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(processes_with_marker(marker)) < count:
        assert time.monotonic() < deadline, "the family never started"
        time.sleep(0.05)


def test_close_stops_children_and_grandchildren(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    supervisor = Supervisor(marker=marker)
    child = supervisor.spawn("family", FAMILY, log_path=tmp_path / "family.log")
    wait_count(marker, 3)  # sh and its two sleeps
    supervisor.close(grace_s=1.0)
    assert not child.alive()
    assert wait_gone(marker) == []
    assert supervisor.children() == []


@pytest.mark.parametrize(
    ("sig", "argv"),
    [
        (signal.SIGTERM, FAMILY),
        # The kernel's parent-death signal reaches direct children only (a fork clears it);
        # the fleet's children (emulators, routers, Prometheus) start no processes of their own.
        (signal.SIGKILL, ["sleep", "60"]),
    ],
    ids=["sigterm-unwinds-the-parent", "sigkill-parent-death-signal"],
)
def test_nothing_outlives_a_parent_that_is_signalled(
    tmp_path: Path, sig: signal.Signals, argv: list[str]
) -> None:
    marker = uuid.uuid4().hex
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(family=argv), marker, str(tmp_path / "child.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        wait_count(marker, 3 if argv == FAMILY else 1)
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
        assert wait_gone(marker) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_ports_picked_together_are_all_different_and_free() -> None:
    """Two picks in a row, each socket closed at once, may be the same port: a CI run's smg was
    given one port for its HTTP and its metrics listener and refused to start. Picked together,
    each socket stays bound until the last is picked."""
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:  # and each is free for its caller to bind
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
