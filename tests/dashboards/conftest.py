"""Fixtures: the example catalog, and a real Prometheus scraping a local fleet's series.

The Prometheus is Debian's `prometheus` binary on a free loopback port with a throwaway data
directory, scraping every second and evaluating the generated rule file every second, so rates
and recording rules have values a few seconds after start. It scrapes emulated SGLang replicas
under traffic (fleet.py) and the stand-in exporter for what cannot run here (standin.py).
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
from tests.dashboards.fleet import ReplicaTarget, emulated_fleet
from tests.dashboards.standin import StandinCollector

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


@pytest.fixture(scope="package")
def standin_exporter(catalog: Catalog) -> Iterator[str]:
    """The stand-in exporter (see standin.py) on a free port; yields host:port."""
    registry = CollectorRegistry()
    registry.register(StandinCollector(catalog))
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


@pytest.fixture(scope="package")
def sglang_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ReplicaTarget]]:
    """Emulated SGLang replicas in two regions, with traffic flowing."""
    with emulated_fleet(tmp_path_factory.mktemp("tokenizer")) as targets:
        yield targets


def prometheus_config(
    *, standin: str, replicas: list[ReplicaTarget], rule_file: Path
) -> dict[str, object]:
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [
            {
                "job_name": "sglang-replicas",
                "static_configs": [{"targets": [r.address], "labels": r.labels} for r in replicas],
            },
            {
                "job_name": "standin-exporters",
                # The stand-in speaks for exporters in several regions: keep its region labels.
                "honor_labels": True,
                "static_configs": [{"targets": [standin]}],
            },
        ],
    }


@pytest.fixture(scope="package")
def live_prometheus(
    tmp_path_factory: pytest.TempPathFactory,
    catalog: Catalog,
    standin_exporter: str,
    sglang_replicas: list[ReplicaTarget],
) -> Iterator[LivePrometheus]:
    """Debian's Prometheus scraping the local fleet, with the generated rules loaded.

    Package-scoped, like the replicas and exporters it scrapes: they stop (and their traffic
    with them) once the last test of tests/dashboards has run, not at the end of the session.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (scripts/provision.sh installs it)")
    work = tmp_path_factory.mktemp("prometheus")
    rule_file = work / "rules.yaml"
    # The fleet evaluates every 30 s; here every second, so the test needs seconds, not minutes.
    rule_file.write_text(yaml.safe_dump(rules.rule_file(catalog, interval="1s"), sort_keys=False))
    config = work / "prometheus.yml"
    scrape = prometheus_config(
        standin=standin_exporter, replicas=sglang_replicas, rule_file=rule_file
    )
    config.write_text(yaml.safe_dump(scrape))
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
