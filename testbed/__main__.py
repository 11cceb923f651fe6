"""``python -m testbed up|down|build [--out DIR]``: the test cluster for humans.

``up`` builds what is missing, starts a cluster whose files live in ``--out`` (default
``out/cluster``; the kubeconfig is ``out/cluster/kubeconfig``) and leaves it running; ``down``
stops it and removes everything but its logs. ``make cluster`` and ``make cluster-down`` call these.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_OUT = Path("out/cluster")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "build"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.command == "build":
        from testbed import builds

        return builds.main([])
    if args.command == "down":
        return _down(args.out)
    return _up(args.out)


def _up(out: Path) -> int:
    from testbed import session
    from testbed.cluster import load_layout

    if load_layout(out) is not None:
        print(f"a cluster may be running from {out}: `make cluster-down` first", file=sys.stderr)
        return 2
    try:
        running = session.start(out)
    except session.UnavailableError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1
    layout = running.layout
    print(
        f"cluster up: API server {layout.network.server}\n"
        f"  export KUBECONFIG={layout.kubeconfig.resolve()}\n"
        f"  kubectl: {layout.bin / 'kubectl'} (Kubernetes 1.37)\n"
        f"  logs: {layout.logs}"
    )
    return 0


def _down(out: Path) -> int:
    from testbed import cluster

    layout = cluster.load_layout(out)
    if layout is None:
        print(f"no cluster recorded in {out}", file=sys.stderr)
        return 1
    cluster.down(layout)
    (out / "layout.json").unlink()
    print(f"cluster down; logs kept in {layout.logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
