"""A real Prometheus for tests: Debian's /usr/bin/prometheus on a free loopback port.

Series are backfilled before it starts (`promtool tsdb create-blocks-from openmetrics`), so a
test knows every sample and its timestamp and queries at a fixed time: no scraping, no waiting.
The server lives in a throwaway folder and is stopped (and the folder removed) on exit.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Family:
    """One metric family for the backfill: `lines` are `name{labels} value timestamp`."""

    name: str
    type: str
    lines: Sequence[str]


def available() -> bool:
    return Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()


def openmetrics(families: Sequence[Family]) -> str:
    """The OpenMetrics text promtool backfills from: families contiguous, then `# EOF`."""
    out = []
    for family in families:
        out.append(f"# TYPE {family.name} {family.type}")
        out.extend(family.lines)
    return "\n".join([*out, "# EOF", ""])


@contextlib.contextmanager
def running_prometheus(families: Sequence[Family]) -> Iterator[str]:
    """Backfill `families`, start Prometheus on them, yield its URL; stop it afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="radixfleet-prom-"))
    try:
        _backfill(folder, families)
        port = _free_port()
        with _server(folder, port) as url:
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _backfill(folder: Path, families: Sequence[Family]) -> None:
    source = folder / "series.om"
    source.write_text(openmetrics(families), encoding="utf-8")
    (folder / "data").mkdir()
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(folder / "data")],
        check=True,
        capture_output=True,
        timeout=60,
    )


@contextlib.contextmanager
def _server(folder: Path, port: int) -> Iterator[str]:
    config = folder / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n", encoding="utf-8")
    args = [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=3650d",
    ]
    log = (folder / "prometheus.log").open("w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, folder / "prometheus.log")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited: {log.read_text()[-2000:]}")
        with (
            contextlib.suppress(urllib.error.URLError, ConnectionError),
            urllib.request.urlopen(url + "/-/ready", timeout=1) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"prometheus not ready after {START_TIMEOUT_S} s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
