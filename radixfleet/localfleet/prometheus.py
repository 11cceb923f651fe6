"""Prometheus for the local fleet: the scrape config it writes, and Debian's server if present.

The fleet keeps two file_sd target files up to date, one for its replicas and one for its
routers, each target labelled with `region`, `model`, `namespace`, `revision` (the Knative
revision, which a cluster's scrape relabels from the pod's label) and `pool` (`serving`, or
`baseline` for a canary's baseline: the pod label `radixfleet.io/pool`) as the dashboards and
the controllers' PromQL expect. The replica job's name matches the dashboards' `.*sglang.*` job
selector.
`prometheus.yml` points at both files, so Prometheus follows replicas as they come and go.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixfleet.labels import SERVING_POOL
from radixfleet.localfleet.procs import Child, Supervisor, free_port

REPLICA_JOB = "sglang-replicas"
ROUTER_JOB = "smg-router"  # its metrics are smg_*; kept out of the .*sglang.* replica jobs
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Target:
    """One scrape target: `host:port` and where it stands in the fleet."""

    address: str
    region: str
    model: str
    namespace: str
    revision: str
    pool: str = SERVING_POOL

    def group(self) -> dict[str, Any]:
        """The file_sd form of this target."""
        labels = {
            "region": self.region,
            "model": self.model,
            "namespace": self.namespace,
            "revision": self.revision,
            "pool": self.pool,
        }
        return {"targets": [self.address], "labels": labels}


def write_targets(path: Path, targets: list[Target]) -> None:
    """Replace the file_sd file atomically, so Prometheus never reads half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps([t.group() for t in targets], indent=1))
    staging.replace(path)


def scrape_config(
    *,
    replica_targets: Path,
    router_targets: Path,
    rule_files: list[Path] | None = None,
    interval: str = "1s",
    region: str | None = None,
) -> dict[str, Any]:
    """prometheus.yml for the fleet: both target files, scraped every `interval`; with `region`,
    only that region's targets, as a region's own Prometheus sees them in a deployed fleet."""

    def job(name: str, path: Path) -> dict[str, Any]:
        found = {
            "job_name": name,
            "file_sd_configs": [{"files": [str(path)], "refresh_interval": "2s"}],
        }
        if region is None:
            return found
        keep = {"source_labels": ["region"], "regex": re.escape(region), "action": "keep"}
        return {**found, "relabel_configs": [keep]}

    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files or []],
        "scrape_configs": [job(REPLICA_JOB, replica_targets), job(ROUTER_JOB, router_targets)],
    }


@dataclass
class PrometheusServer:
    """A running Prometheus: its URL and process, and its command line to start it again."""

    url: str
    child: Child
    argv: tuple[str, ...] = ()

    def stop(self, supervisor: Supervisor) -> None:
        """Stop it (SIGTERM: its data is kept in its storage folder)."""
        supervisor.stop(self.child, grace_s=10.0)

    def start_again(self, supervisor: Supervisor) -> None:
        """Start it again on the same address and storage; return once it is ready."""
        log_path = self.child.log_path.with_suffix(".again.log")
        self.child = supervisor.spawn(self.child.name, self.argv, log_path=log_path)
        _wait_ready(self)


def prometheus_binary() -> str | None:
    """Debian's `prometheus` (or any on PATH); None when it is not installed."""
    return shutil.which("prometheus")


def start_prometheus(
    *, supervisor: Supervisor, config: Path, data_dir: Path, host: str = "127.0.0.1"
) -> PrometheusServer | None:
    """Start Prometheus on a free port with `config`; None when it is not installed."""
    binary = prometheus_binary()
    if binary is None:
        return None
    port = free_port(host)
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={host}:{port}",
        "--log.level=warn",
    ]
    child = supervisor.spawn("prometheus", argv, log_path=data_dir.parent / "prometheus.log")
    server = PrometheusServer(url=f"http://{host}:{port}", child=child, argv=tuple(argv))
    _wait_ready(server)
    return server


def wait_scraped(server: PrometheusServer, *, targets: int, timeout_s: float = 60.0) -> None:
    """Return once `targets` targets have been scraped and are up. A counter first scraped
    after it moved shows no `increase()`: callers that count requests wait for this first."""
    deadline = time.monotonic() + timeout_s
    while _up_targets(server) < targets:
        if time.monotonic() > deadline:
            raise RuntimeError(f"prometheus did not scrape {targets} targets in {timeout_s:.0f} s")
        time.sleep(0.2)


def _up_targets(server: PrometheusServer) -> int:
    try:
        with urllib.request.urlopen(f"{server.url}/api/v1/targets", timeout=2) as answer:
            found = json.load(answer)["data"]["activeTargets"]
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError):
        return 0
    return sum(1 for target in found if target.get("health") == "up")


def _wait_ready(server: PrometheusServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not server.child.alive():
            raise RuntimeError(f"prometheus exited: {server.child.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"prometheus not ready after {START_TIMEOUT_S:.0f} s")
