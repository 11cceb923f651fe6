"""Importing an image archive into a containerd, by digest."""

from __future__ import annotations

from testbed.images.cache import ImageError, ImageRecord, run_tool


def load_into_containerd(
    record: ImageRecord,
    *,
    address: str,
    namespace: str = "k8s.io",
    snapshotter: str | None = None,
) -> None:
    """Import ``record``'s archive into the containerd at ``address`` and check it is listed.

    The archive's index names the image (``io.containerd.image.name``), so it lands under
    ``record.reference`` and ``record.pinned``, both with ``record.digest`` as their target.
    """
    ctr = ["ctr", "--address", address, "--namespace", namespace]
    # --digests with --base-name adds the image by digest too (``record.pinned``), the name a
    # manifest that pins the digest asks the CRI for.
    repository = record.reference.rpartition(":")[0]
    command = [*ctr, "images", "import", "--base-name", repository, "--digests"]
    if snapshotter:
        command += ["--snapshotter", snapshotter]
    run_tool([*command, str(record.archive)], image=record.name, step="ctr images import")
    listed = run_tool([*ctr, "images", "ls"], image=record.name, step="ctr images ls")
    names = {words[0] for words in map(str.split, listed.splitlines()) if record.digest in words}
    if not {record.reference, record.pinned} <= names:
        raise ImageError(
            f"image {record.name}: {record.reference} and {record.pinned} are not both in "
            f"containerd's list after import:\n{listed[-2000:]}"
        )
