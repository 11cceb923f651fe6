"""Run a container of an image archive with runc directly: no containerd, no registry.

The archive is unpacked by ``umoci`` into a runtime bundle (its ``config.json`` says the image's
user, environment and command); we then make the root file system read-only, give the container
a tmpfs at ``/tmp`` (the pod's emptyDir), and share the host's network namespace so the host can
reach the container's port on loopback. Everything is removed on exit: the container, the
bundle, runc's state.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.images import ImageRecord
from testbed.oci import unpack_archive


@dataclass(frozen=True)
class Bundle:
    """An unpacked runtime bundle: its folder, its ``config.json`` and the image's environment."""

    folder: Path
    image_env: tuple[str, ...] = ()

    @property
    def config(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads((self.folder / "config.json").read_text())
        return value

    def write(self, config: dict[str, Any]) -> None:
        (self.folder / "config.json").write_text(json.dumps(config, indent=2))


@contextlib.contextmanager
def unpacked(record: ImageRecord) -> Iterator[Bundle]:
    """The image as a runc bundle in a temporary folder (deleted afterwards)."""
    with tempfile.TemporaryDirectory(prefix="rf-runc-") as scratch:
        layout = unpack_archive(record.archive, Path(scratch) / "layout")
        tag = record.reference.rpartition(":")[2]
        bundle = Path(scratch) / "bundle"
        subprocess.run(
            ["umoci", "unpack", "--image", f"{layout.root}:{tag}", str(bundle)],
            check=True,
            capture_output=True,
        )
        manifest = layout.read_json(layout.manifest_descriptor()["digest"])
        config = layout.read_json(manifest["config"]["digest"])
        yield Bundle(bundle, tuple(config["config"].get("Env", [])))


def harden(bundle: Bundle, *, args: Sequence[str] | None = None) -> dict[str, Any]:
    """Read-only root, tmpfs /tmp, host network, optional command; return the new config."""
    config = bundle.config
    config["root"]["readonly"] = True
    config["process"]["terminal"] = False
    if args is not None:
        config["process"]["args"] = list(args)
    # umoci sets HOME from /etc/passwd over the image's own; containerd keeps the image's.
    image_env = {item.split("=", 1)[0]: item for item in bundle.image_env}
    env = [image_env.get(item.split("=", 1)[0], item) for item in config["process"]["env"]]
    config["process"]["env"] = env
    config["mounts"].append(
        {
            "destination": "/tmp",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777", "size=256m"],
        }
    )
    namespaces = config["linux"]["namespaces"]
    config["linux"]["namespaces"] = [ns for ns in namespaces if ns["type"] != "network"]
    bundle.write(config)
    return config


@dataclass
class Running:
    """A container started by :func:`run`: its id and its output so far."""

    container_id: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def run(bundle: Bundle, *, container_id: str) -> Iterator[Running]:
    """Run the bundle's container in the background; kill and delete it on exit."""
    state = Path(tempfile.mkdtemp(prefix="rf-runc-state-"))
    log = bundle.folder.parent / "container.log"
    runc = ["runc", "--root", str(state)]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*runc, "run", "--bundle", str(bundle.folder), container_id],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Running(container_id, log)
    finally:
        subprocess.run([*runc, "kill", container_id, "TERM"], capture_output=True, check=False)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            subprocess.run([*runc, "kill", container_id, "KILL"], capture_output=True, check=False)
            process.wait(timeout=20)
        subprocess.run([*runc, "delete", "--force", container_id], capture_output=True, check=False)
        shutil.rmtree(state, ignore_errors=True)


def run_to_end(bundle: Bundle, *, container_id: str, timeout: float) -> tuple[int, str]:
    """Run the bundle's container in the foreground; its exit status and output."""
    with tempfile.TemporaryDirectory(prefix="rf-runc-state-") as state:
        result = subprocess.run(
            ["runc", "--root", state, "run", "--bundle", str(bundle.folder), container_id],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    return result.returncode, result.stdout + result.stderr


def wait_for_http(url: str, *, timeout: float, running: Running) -> str:
    """The body of ``url`` once it answers 200; else fail, showing the container's output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return str(response.read().decode())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} never answered 200; container output:\n{running.output()[-3000:]}")
