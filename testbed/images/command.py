"""``python3 -m testbed.images [NAME...]``: build the named images that are missing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from testbed.images.binaries import pause
from testbed.images.cache import ImageError, ImageRecord
from testbed.images.containerfiles import radixfleet, smg, storage_initializer
from testbed.images.debian import base, python_base

IMAGES: dict[str, Callable[[], ImageRecord]] = {
    "base": base,
    "python": python_base,
    "pause": pause,
    "smg": smg,
    "radixfleet": radixfleet,
    "storage-initializer": storage_initializer,
}


def main(argv: list[str]) -> int:
    """Build the named images (all by default) that are missing, and print each one."""
    unknown = [name for name in argv if name not in IMAGES]
    if unknown:
        print(f"testbed images: unknown {unknown}; known: {', '.join(IMAGES)}", file=sys.stderr)
        return 2
    for name in argv or list(IMAGES):
        started = time.monotonic()
        try:
            record = IMAGES[name]()
        except ImageError as error:
            print(f"testbed images: {error}", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - started
        print(
            f"testbed images: {name:<10} {record.pinned} {record.size / 2**20:7.1f} MiB "
            f"(this run {elapsed:.1f} s, cold build {record.build_seconds:.0f} s)"
        )
    return 0
