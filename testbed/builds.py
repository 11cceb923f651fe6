"""Every Go program the test bed builds, and a command to build them all.

``python3 -m testbed.builds`` builds them.

Standard library only: ``scripts/provision.sh`` runs it before the project's environment exists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from testbed.gobuild import BuildError, GoBuild, ensure_built

HERE = Path(__file__).resolve().parent
KUBE_VERSION = "v1.37.2"


def _kube_ldflags(version: str) -> str:
    # Without these the components report v0.0.0-master, which kubectl and the kubelet's
    # version skew checks cannot parse; -s -w drop debug symbols (half the size and link time).
    major, minor = version.removeprefix("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return (
        f"-s -w -X {pkg}.gitVersion={version} -X {pkg}.gitMajor={major} "
        f"-X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean"
    )


# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl in
# one multi-call binary (testbed/kube/main.go): they share most of their packages.
KUBE = GoBuild(
    name="kube",
    source_dir=HERE / "kube",
    mains=(("kube", "."),),
    ldflags=_kube_ldflags(KUBE_VERSION),
)

ALL: tuple[GoBuild, ...] = (KUBE,)


def main(argv: list[str]) -> int:
    wanted = set(argv) or {build.name for build in ALL}
    for build in ALL:
        if build.name not in wanted:
            continue
        started = time.monotonic()
        try:
            folder = ensure_built(build)
        except BuildError as error:
            print(f"testbed build: {error}", file=sys.stderr)
            return 1
        print(f"testbed build: {build.name} at {folder} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
