"""The test bed's container images, built on this machine with no registry, cached by their inputs.

No container registry can be reached here, so every image the cluster runs is built locally:

- ``base``: Debian bookworm from ``mmdebstrap`` (minbase, ca-certificates, tzdata, user 65532),
  from the Debian mirror this machine's apt uses; ``python``: the same plus Debian's python3.
- ``pause``: the kubelet's sandbox image, our own static C program (``containerfiles/pause.c``).
- ``radixfleet``: the repository's ``Containerfile`` (operator, region entry, emulated replica),
  built by ``buildah`` FROM the ``python`` base by digest.
- ``smg``: the SGLang gateway from its wheel, pinned with hashes.
- :func:`go_binary_image`: any static Go binary (from ``testbed.gobuild``) on the base.

Each image is an ``oci-archive`` under ``${XDG_CACHE_HOME:-~/.cache}/radixfleet/images/<name>/
<hash>/``, where the hash covers every input (sources, lock, package lists, binaries, tools'
versions, the base's digest), so a second run is a no-op. The mmdebstrap images, pause and the
Go images are written by :mod:`testbed.oci` with fixed times and sorted tars: the same inputs
give the same manifest digest. :func:`load_into_containerd` imports an archive into a containerd.

Only the standard library is used, so that ``scripts/provision.sh`` can build the images before
the project's environment exists: ``python3 -m testbed.images [NAME...]``.

One module per part: ``cache``, ``debian``, ``binaries``, ``containerfiles``, ``containerd``
and ``command``; this package names what each holds.
"""

from __future__ import annotations

from testbed.images.binaries import (
    PAUSE_CFLAGS,
    go_binary_image,
    pause,
)
from testbed.images.cache import (
    ARCHIVE,
    CA_BUNDLE,
    EPOCH,
    FILES,
    HERE,
    KEEP_BUILDS,
    NONROOT,
    PATH_ENV,
    PREFIX,
    REPO,
    Builder,
    ImageError,
    ImageRecord,
    Inputs,
    cache_root,
    ensure_image,
    run_tool,
    tool_version,
)
from testbed.images.command import (
    IMAGES,
    main,
)
from testbed.images.containerd import (
    load_into_containerd,
)
from testbed.images.containerfiles import (
    PROJECT_FILES,
    PROJECT_PACKAGES,
    radixfleet,
    smg,
    storage_initializer,
)
from testbed.images.debian import (
    BASE_PACKAGES,
    DPKG_OPTIONS,
    DROP_FILES,
    DROP_UNDER,
    KEEP_FOLDERS,
    NONROOT_HOOK,
    PYTHON_PACKAGES,
    SUITE,
    base,
    debian_sources,
    python_base,
)

__all__ = [
    "ARCHIVE",
    "BASE_PACKAGES",
    "CA_BUNDLE",
    "DPKG_OPTIONS",
    "DROP_FILES",
    "DROP_UNDER",
    "EPOCH",
    "FILES",
    "HERE",
    "IMAGES",
    "KEEP_BUILDS",
    "KEEP_FOLDERS",
    "NONROOT",
    "NONROOT_HOOK",
    "PATH_ENV",
    "PAUSE_CFLAGS",
    "PREFIX",
    "PROJECT_FILES",
    "PROJECT_PACKAGES",
    "PYTHON_PACKAGES",
    "REPO",
    "SUITE",
    "Builder",
    "ImageError",
    "ImageRecord",
    "Inputs",
    "base",
    "cache_root",
    "debian_sources",
    "ensure_image",
    "go_binary_image",
    "load_into_containerd",
    "main",
    "pause",
    "python_base",
    "radixfleet",
    "run_tool",
    "smg",
    "storage_initializer",
    "tool_version",
]
