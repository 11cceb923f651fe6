"""The test bed's images: built here (or taken from the cache), reproducible, and runnable.

Cold builds take minutes (mmdebstrap, buildah with wheels from the package index); later runs
reuse the cache under ~/.cache/radixfleet/images. Containers run under runc directly, as the
image's own non-root user with a read-only root file system, the way the cluster runs them.
"""

from __future__ import annotations

import gzip
import json
import socket
import tarfile
from pathlib import Path
from typing import Any

import pytest

from testbed import images
from testbed.images import ImageRecord
from testbed.oci import Layout, unpack_archive
from tests.testbed import runc
from tests.testbed.containerd import containerd, mounts_under

pytestmark = [pytest.mark.images, pytest.mark.slow]


def image_config(record: ImageRecord, tmp_path: Path) -> dict[str, Any]:
    """The OCI config of ``record``'s image, read from its archive."""
    layout = unpack_archive(record.archive, tmp_path / record.name)
    manifest = layout.read_json(layout.manifest_descriptor()["digest"])
    return layout.read_json(manifest["config"]["digest"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def radixfleet() -> ImageRecord:
    return images.radixfleet()


@pytest.fixture(scope="module")
def smg() -> ImageRecord:
    return images.smg()


def test_base_and_pause_exist_with_digests() -> None:
    for record in (images.base(), images.pause()):
        assert record.archive.is_file()
        assert record.digest.startswith("sha256:") and len(record.digest) == 71
        assert record.pinned == f"localhost/radixfleet/{record.name}@{record.digest}"


def test_a_second_build_is_a_cache_hit() -> None:
    first = images.pause()
    assert images.pause() == first


def test_pause_is_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = images.pause()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache: a cold build
    rebuilt = images.pause()
    assert rebuilt.archive != cached.archive
    assert rebuilt.digest == cached.digest


def debian_packages(record: ImageRecord) -> str:
    """The ``name version`` list the build wrote beside the image's archive."""
    return (record.archive.parent / "debian-packages.txt").read_text()


def test_base_is_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second mmdebstrap from the same mirror state gives the same manifest digest.

    The cached base may be days older than the mirror (a point release or a security update
    since): then its packages differ, and the test builds once more, so that it compares two
    builds of one mirror state, never two mirror states.
    """
    cached = images.base()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "first"))  # an empty cache: a cold build
    rebuilt = images.base()
    assert rebuilt.archive != cached.archive
    if debian_packages(rebuilt) != debian_packages(cached):
        cached = rebuilt
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "second"))
        rebuilt = images.base()
        assert debian_packages(rebuilt) == debian_packages(cached), "the mirror moved twice"
    assert rebuilt.digest == cached.digest


def test_the_pause_image_runs_as_65535_and_stops_on_sigterm(tmp_path: Path) -> None:
    record = images.pause()
    config = image_config(record, tmp_path)["config"]
    assert config["Entrypoint"] == ["/pause"] and config["User"] == "65535:65535"
    with runc.unpacked(record) as bundle:
        runc.harden(bundle, args=["/pause", "-v"])
        status, output = runc.run_to_end(bundle, container_id="rf-test-pause", timeout=60)
    assert status == 0, output
    assert "radixfleet pause" in output


def test_the_radixfleet_image_is_non_root_with_its_entrypoint(
    radixfleet: ImageRecord, tmp_path: Path
) -> None:
    config = image_config(radixfleet, tmp_path)["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/opt/radixfleet/venv/bin/radixfleet"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["HOME"] == "/tmp" and env["RADIXFLEET_CACHE_DIR"] == "/opt/radixfleet/cache"


def test_a_radixfleet_replica_serves_health_with_a_read_only_root(radixfleet: ImageRecord) -> None:
    port = free_port()
    command = [
        "/opt/radixfleet/venv/bin/radixfleet", "emulate", "--host", "127.0.0.1",
        "--port", str(port), "--warm",
    ]  # fmt: skip
    with runc.unpacked(radixfleet) as bundle:
        config = runc.harden(bundle, args=command)
        assert config["process"]["user"]["uid"] == 65532
        assert config["root"]["readonly"] is True
        with runc.run(bundle, container_id=f"rf-test-emulate-{port}") as running:
            runc.wait_for_http(f"http://127.0.0.1:{port}/health", timeout=180, running=running)
            models = runc.wait_for_http(
                f"http://127.0.0.1:{port}/v1/models", timeout=30, running=running
            )
    assert json.loads(models)["data"]


def test_the_gateway_image_runs_smg_launch_help(smg: ImageRecord) -> None:
    with runc.unpacked(smg) as bundle:
        config = runc.harden(bundle)
        assert config["process"]["user"]["uid"] == 65532
        status, output = runc.run_to_end(bundle, container_id="rf-test-smg", timeout=120)
    assert status == 0, output
    assert "--worker-urls" in output and "cache_aware" in output


def test_a_go_binary_image_runs_its_binary_as_non_root(tmp_path: Path) -> None:
    """Any static binary on the base; the pause binary stands in for a Go one here."""
    layout = unpack_archive(images.pause().archive, tmp_path / "pause")
    binary = tmp_path / "hello"
    binary.write_bytes(_only_file(layout))
    record = images.go_binary_image(
        "test-static", binary, entrypoint=["/usr/local/bin/hello"], args=["-v"]
    )
    assert image_config(record, tmp_path)["config"]["User"] == "65532:65532"
    with runc.unpacked(record) as bundle:
        runc.harden(bundle)
        status, output = runc.run_to_end(bundle, container_id="rf-test-static", timeout=60)
    assert status == 0 and "radixfleet pause" in output, output


def test_images_import_into_containerd_with_their_digests(radixfleet: ImageRecord) -> None:
    with containerd() as address:
        for record in (images.pause(), images.base(), radixfleet):
            images.load_into_containerd(record, address=address)
        folder = Path(address).parent
    assert not folder.exists() and not mounts_under(folder)


def _only_file(layout: Layout) -> bytes:
    """The one regular file of a one-layer image (the pause binary)."""
    manifest = layout.read_json(layout.manifest_descriptor()["digest"])
    (layer,) = manifest["layers"]
    with gzip.open(layout.blob_path(layer["digest"])) as raw, tarfile.open(fileobj=raw) as tar:
        (member,) = [m for m in tar.getmembers() if m.isfile()]
        data = tar.extractfile(member)
        assert data is not None
        return data.read()
