"""``python -m testbed up|down|build|kingress|demo [--out DIR] [--bare]``: the test cluster for
humans.

``up`` builds what is missing, starts a cluster whose files live in ``--out`` (default
``out/cluster``; the kubeconfig is ``out/cluster/kubeconfig``), installs the platform radixfleet
runs on as infra installs it (KServe and Knative Serving; ``--bare`` leaves a bare Kubernetes)
readies it for the README's kubectl path (radixfleet's and smg's images loaded, predictor pods
fitted to the node) and leaves it running, with the test bed's KIngress marker beside it
(``kingress``, a process of its own: no Knative networking layer can run here, see
``testbed/NETWORKING.md``). ``down``
stops both and removes everything but the logs. ``make cluster`` and ``make cluster-down`` call
these.

``demo`` (``make demo-cluster``) runs ``radixfleet demo``'s replay through a deployed radixfleet
on a cluster it starts and stops (``testbed/demo.py``); its report goes to ``--out`` (default
``out/demo-cluster``). It lives here, not in the product's CLI: it needs this repository's test
bed, which the shipped image does not carry.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.cluster import Cluster

DEFAULT_OUT = Path("out/cluster")
DEMO_OUT = Path("out/demo-cluster")
MARKER_PID = "kingress-marker.pid"
# The images `up` loaded, as the README's kubectl path reads them: `source out/cluster/images.env`.
IMAGES_ENV = "images.env"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "build", "kingress", "demo"])
    parser.add_argument("--out", type=Path, help=f"default {DEFAULT_OUT} ({DEMO_OUT} for demo)")
    parser.add_argument("--bare", action="store_true", help="up: no KServe or Knative")
    parser.add_argument("--quick", action="store_true", help="demo: a 15-second workload")
    parser.add_argument("--seed", type=int, default=0, help="demo: the session sampling's seed")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args.out or DEMO_OUT, quick=args.quick, seed=args.seed)
    args.out = args.out or DEFAULT_OUT
    if args.command == "build":
        from testbed import builds

        return builds.main([])
    if args.command == "down":
        return _down(args.out)
    if args.command == "kingress":
        return _mark_kingresses(args.out)
    return _up(args.out, bare=args.bare)


def _up(out: Path, *, bare: bool) -> int:
    from testbed import session
    from testbed.charts import ChartError
    from testbed.cluster import ClusterError, load_layout
    from testbed.gobuild import BuildError
    from testbed.images import ImageError

    if load_layout(out) is not None:
        print(f"a cluster may be running from {out}: `make cluster-down` first", file=sys.stderr)
        return 2
    try:
        running = session.start(out)
    except session.UnavailableError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1
    layout = running.layout
    print(f"cluster up: API server {layout.network.server}")
    if not bare:
        try:
            session.install_platform(running)
            _ready_for_the_kubectl_path(running, out / IMAGES_ENV)
        except (ClusterError, ChartError, BuildError, ImageError) as error:
            print(f"cluster: the platform did not install: {error}", file=sys.stderr)
            print("the cluster is still up: `make cluster-down` stops it", file=sys.stderr)
            return 1
        _start_marker(out)
        print("  KServe v0.20.0, Knative Serving 1.21.1 and prometheus-operator v0.82.2 with a")
        print("  Prometheus installed as infra installs them;")
        print("  KIngresses marked ready by the test bed (it routes nothing by host name);")
        print("  the images for the README's kubectl path, loaded into the node (SGLang's is")
        print(f"  the emulated replica): source {(out / IMAGES_ENV).resolve()}")
    print(
        f"  export KUBECONFIG={layout.kubeconfig.resolve()}\n"
        f"  kubectl: {layout.bin / 'kubectl'} (Kubernetes 1.35)\n"
        f"  logs: {layout.logs}"
    )
    return 0


def _demo(out: Path, *, quick: bool, seed: int) -> int:
    """The demo's replay on a cluster of its own; non-zero if one request failed."""
    from rich.console import Console

    from radixfleet.demo.run import QUICK_DURATION_S, DemoOptions
    from testbed.demo import run_cluster_demo
    from testbed.session import UnavailableError

    options = DemoOptions(out=out, seed=seed)
    if quick:
        options = dataclasses.replace(options, duration_s=QUICK_DURATION_S)
    try:
        summary = run_cluster_demo(options, console=Console())
    except UnavailableError as error:
        print(f"demo: no test cluster here: {error} (`make demo-cluster` provisions what it "
              "needs; `make cluster-down` stops another)", file=sys.stderr)  # fmt: skip
        return 1
    failed = summary["overall"]["failed"]
    for request in summary.get("failed_requests", [])[:5]:
        print(f"  {request['region']}/{request['model']}: {request['error']}", file=sys.stderr)
    if failed:
        print(f"demo: {failed} requests failed", file=sys.stderr)
    return 1 if failed else 0


def _ready_for_the_kubectl_path(running: Cluster, env_file: Path) -> None:
    """The README's kubectl path on this node: the images it names, loaded by digest (no
    registry here), their variables written to `env_file` for a shell to source, and predictor
    pods fitted to the node's 2 cores (the test bed's one admission policy)."""
    from testbed import emulated, images, session

    radixfleet, smg = images.radixfleet(), images.smg()
    session.load_images(running, [radixfleet, smg])
    session.apply(running, emulated.fit_to_the_node())
    variables = {"RADIXFLEET_IMAGE": radixfleet.pinned, "SMG_IMAGE": smg.pinned,
                 "SGLANG_IMAGE": radixfleet.pinned}  # fmt: skip
    env_file.write_text("".join(f"export {k}={v}\n" for k, v in variables.items()))


def _start_marker(out: Path) -> None:
    """``python -m testbed kingress`` in a session of its own, outliving this command."""
    log = (out / "logs" / "kingress-marker.log").open("ab")
    argv = [sys.executable, "-m", "testbed", "kingress", "--out", str(out)]
    marker = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                              start_new_session=True)  # fmt: skip
    (out / MARKER_PID).write_text(str(marker.pid))


def _mark_kingresses(out: Path) -> int:
    """Mark the cluster's KIngresses ready until SIGTERM."""
    from testbed import session
    from testbed.cluster import Cluster, load_layout

    layout = load_layout(out)
    if layout is None:
        print(f"no cluster recorded in {out}", file=sys.stderr)
        return 1
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with session.kingresses_marked_ready(Cluster(layout)):
        # Also ends once the cluster is gone (taken down without `down`, which stops it).
        while not stopped.wait(5.0) and load_layout(out) is not None:
            pass
    return 0


def _down(out: Path) -> int:
    from testbed import cluster

    layout = cluster.load_layout(out)
    if layout is None:
        print(f"no cluster recorded in {out}", file=sys.stderr)
        return 1
    _stop_marker(out)
    cluster.down(layout)
    (out / "layout.json").unlink()
    print(f"cluster down; logs kept in {layout.logs}")
    return 0


def _stop_marker(out: Path) -> None:
    pid_file = out / MARKER_PID
    with contextlib.suppress(OSError, ValueError):  # never started (--bare), or gone already
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    pid_file.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
