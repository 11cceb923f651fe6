"""radixfleet's controllers as the real processes a cluster runs (`radixfleet <controller> run`),
started from the test's environment against the test cluster.

Prometheus and AWS are pointed at a closed port: nothing listens, so every call fails at once and
the controllers halt on the missing data (what they should do) after their Kubernetes calls.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

CLOSED = "http://127.0.0.1:9"


def start(args: Sequence[str], kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    """`radixfleet ARGS`, authenticated by `kubeconfig`, its output in `log`."""
    env = {
        **os.environ, "KUBECONFIG": str(kubeconfig), "RADIXFLEET_PROMETHEUS_URL": CLOSED,
        "AWS_ENDPOINT_URL": CLOSED, "AWS_ACCESS_KEY_ID": "test", "AWS_REGION": "us-east-1",
        "AWS_SECRET_ACCESS_KEY": "test",  # a closed endpoint: no AWS call can succeed
    }  # fmt: skip
    command = [str(Path(sys.executable).parent / "radixfleet"), *args]
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def running(args: Sequence[str], kubeconfig: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The controller runs while the block does."""
    process = start(args, kubeconfig, log)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
