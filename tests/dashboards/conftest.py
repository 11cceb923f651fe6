"""Fixtures: the example catalog, and a real Prometheus scraping a local fleet's series.

The Prometheus is Debian's `prometheus` binary on a free loopback port with a throwaway data
directory, scraping every second and evaluating the generated rule file every second, so rates
and recording rules have values a few seconds after start.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from radixfleet.config import load_catalog
from radixfleet.config.catalog import Catalog
from radixfleet.dashboards import promql, rules
from tests.dashboards.standin import REGIONS, StandinCollector

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "inferenceservices" / "catalog.yaml"
STARTUP_TIMEOUT_S = 20.0


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(CATALOG)


@dataclass(frozen=True)
class LivePrometheus:
    """A running Prometheus: its URL, and when it started scraping."""

    url: str
    started: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def standin_exporter(catalog: Catalog) -> Iterator[str]:
    """The stand-in exporter (see standin.py) on a free port; yields host:port."""
    registry = CollectorRegistry()
    registry.register(StandinCollector(catalog, with_sglang=True))
    server = serve_text_format(registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=5)


def serve_text_format(registry: CollectorRegistry) -> ThreadingHTTPServer:
    """An HTTP server answering every GET with the registry in the text format 0.0.4.

    prometheus-client 0.26 answers Prometheus's OpenMetrics Accept header with sample names
    whose ':' became '_' (its escaping checks sample names as label names), which would rename
    every sglang:* series; the text format keeps them, as SGLang's own server does.
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # Prometheus may stop mid-scrape when the session ends.
            with contextlib.suppress(BrokenPipeError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would drown the test output

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def prometheus_config(targets: list[str], rule_file: Path) -> dict[str, object]:
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [
            {
                "job_name": "standin-exporters",
                # The stand-in speaks for exporters in several regions: keep its region labels.
                "honor_labels": True,
                "static_configs": [{"targets": targets}],
            },
            {
                # Stand-in for the SGLang replicas' own scrape jobs until the emulated replicas
                # run here: one target per region, so `up` of an sglang job exists per region.
                # It stores no samples; the job above already has them.
                "job_name": "sglang-standin",
                "static_configs": [
                    {"targets": targets, "labels": {"region": region}} for region in REGIONS
                ],
                "metric_relabel_configs": [{"action": "drop", "regex": ".*"}],
            },
        ],
    }


@pytest.fixture(scope="session")
def live_prometheus(
    tmp_path_factory: pytest.TempPathFactory, catalog: Catalog, standin_exporter: str
) -> Iterator[LivePrometheus]:
    """Debian's Prometheus scraping the local fleet, with the generated rules loaded."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (scripts/provision.sh installs it)")
    work = tmp_path_factory.mktemp("prometheus")
    rule_file = work / "rules.yaml"
    # The fleet evaluates every 30 s; here every second, so the test needs seconds, not minutes.
    rule_file.write_text(yaml.safe_dump(rules.rule_file(catalog, interval="1s"), sort_keys=False))
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config([standin_exporter], rule_file)))
    port = free_port()
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        started = _wait_ready(url, proc)
        yield LivePrometheus(url, started)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}")
        try:
            if promql.query(url, "up == 1"):
                return time.time()
        except promql.PrometheusError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"prometheus at {url} scraped nothing in {STARTUP_TIMEOUT_S} s")


def wait_for_series(url: str, exprs: list[str], *, timeout_s: float) -> dict[str, int]:
    """Poll until every expression returns series or the time is up; series counts by expr."""
    deadline = time.monotonic() + timeout_s
    counts: dict[str, int] = {}
    while True:
        counts = {e: len(promql.query(url, e)) for e in exprs}
        if all(counts.values()) or time.monotonic() > deadline:
            return counts
        time.sleep(0.5)
