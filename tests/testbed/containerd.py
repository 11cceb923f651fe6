"""A throwaway containerd (Debian's) with its own root, state and socket under a temporary folder.

Used to check that our image archives import the way the kubelet's containerd will see them.
The CRI plugin is off (no kubelet talks to it); on exit the daemon is stopped, any mount left
under its folder is lazily unmounted, and the folder is removed.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

CONFIG = """version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{root}/containerd.sock"

[ttrpc]
  address = "{root}/containerd-ttrpc.sock"
"""


@contextlib.contextmanager
def containerd() -> Iterator[str]:
    """Start containerd; yield its socket address."""
    folder = Path(tempfile.mkdtemp(prefix="rf-containerd-"))
    (folder / "config.toml").write_text(CONFIG.format(root=folder))
    log = (folder / "containerd.log").open("wb")
    process = subprocess.Popen(
        ["containerd", "--config", str(folder / "config.toml")], stdout=log, stderr=log
    )
    address = str(folder / "containerd.sock")
    try:
        _wait_ready(address, process=process, log=folder / "containerd.log")
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()
        unmount_under(folder)
        subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)


def _wait_ready(address: str, *, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"containerd exited:\n{log.read_text()[-3000:]}")
        ready = subprocess.run(
            ["ctr", "--address", address, "version"], capture_output=True, check=False
        )
        if ready.returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"containerd never answered on {address}:\n{log.read_text()[-3000:]}")


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder``, deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(folder) or point.startswith(f"{folder}/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_under(folder: Path) -> None:
    for point in mounts_under(folder):
        subprocess.run(["umount", "-l", point], check=False)
