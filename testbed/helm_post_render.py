#!/usr/bin/env python3
"""Helm post-renderer of the test bed: a chart's rendered objects on stdin, the same with one
change on stdout (``helm install --post-renderer``).

``host-path DAEMONSET VOLUME PATH``: the hostPath volume ``VOLUME`` of the DaemonSet
``DAEMONSET`` points at ``PATH``. The test node is this machine, so a chart's node folder
(KServe's node agent keeps models in ``/models``) moves into the test run's own folder. A chart
without that DaemonSet or volume is an error: the change must not silently stop applying.

Run by Helm as a program (the project's Python, PyYAML only), never imported by the tests.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml


def set_host_path(objects: list[dict[str, Any]], daemonset: str, volume: str, path: str) -> None:
    """Point ``daemonset``'s hostPath volume ``volume`` at ``path``; raise when it is missing."""
    for obj in objects:
        if obj.get("kind") != "DaemonSet" or obj["metadata"]["name"] != daemonset:
            continue
        for entry in obj["spec"]["template"]["spec"].get("volumes", []):
            if entry["name"] == volume and "hostPath" in entry:
                entry["hostPath"]["path"] = path
                return
    raise LookupError(f"no DaemonSet {daemonset} with a hostPath volume {volume} in the chart")


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] != "host-path":
        print("usage: helm_post_render.py host-path DAEMONSET VOLUME PATH", file=sys.stderr)
        return 2
    objects = [obj for obj in yaml.safe_load_all(sys.stdin) if obj]
    try:
        set_host_path(objects, *argv[1:])
    except LookupError as error:
        print(f"helm_post_render: {error}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
