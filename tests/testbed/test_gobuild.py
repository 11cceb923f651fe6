"""The test bed's Go builds: an edit to an upstream module applies only where it was written
for, and the NetworkPolicy enforcer is built with its one edit."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from testbed.builds import NETPOL, NETPOL_MODULE
from testbed.gobuild import (
    BuildError,
    Edit,
    GoBuild,
    _apply,
    _go_args,
    _module_dir,
    ensure_built,
)

UPSTREAM = "func f() {\n\treturn queue()\n}\n\nfunc g() {\n\treturn queue()\n}\n"


def _edit(count: int) -> Edit:
    return Edit(module="example.com/m", file="f.go", old="queue()", new="target()", count=count)


def test_an_edit_replaces_every_occurrence_it_was_written_for(tmp_path: Path) -> None:
    source = tmp_path / "f.go"
    source.write_text(UPSTREAM)
    _apply(GoBuild(name="m", source_dir=tmp_path, mains=()), _edit(2), source)
    assert source.read_text() == UPSTREAM.replace("queue()", "target()")


@pytest.mark.parametrize("count", [1, 3], ids=["fewer", "more"])
def test_an_edit_that_no_longer_fits_the_upstream_file_fails_the_build(
    tmp_path: Path, count: int
) -> None:
    source = tmp_path / "f.go"
    source.write_text(UPSTREAM)
    with pytest.raises(BuildError, match="2 times, not"):
        _apply(GoBuild(name="m", source_dir=tmp_path, mains=()), _edit(count), source)
    assert source.read_text() == UPSTREAM


def test_builds_without_edits_keep_the_hash_they_had_before_edits_existed(tmp_path: Path) -> None:
    """A cached Kubernetes build (20 minutes cold) must not be rebuilt because edits exist."""
    (tmp_path / "go.mod").write_text("module example.com/m\n")
    plain = GoBuild(name="m", source_dir=tmp_path, mains=(("m", "."),))
    edited = GoBuild(name="m", source_dir=tmp_path, mains=(("m", "."),), edits=(_edit(1),))
    before = hashlib.sha256(b"go.mod\0module example.com/m\n\0")  # the hash as it was
    before.update(repr((plain.mains, plain.ldflags, plain.tags, _go_args())).encode())
    assert plain.source_hash() == before.hexdigest()[:16]
    assert edited.source_hash() != plain.source_hash()


def test_the_network_policy_enforcer_is_built_with_the_xtables_queue() -> None:
    binary = (ensure_built(NETPOL) / "kube-network-policies").read_bytes()
    assert b"networkpolicy.nfqueueTarget" in binary


def test_an_edited_module_is_found_on_a_machine_that_never_downloaded_it(tmp_path: Path) -> None:
    """A fresh machine's module cache is empty: `go list -m` names no folder there, which
    failed the enforcer's first build in a cold provision."""
    env = dict(os.environ, GOMODCACHE=str(tmp_path / "mod"), GOFLAGS="-mod=mod")
    folder = _module_dir(NETPOL, NETPOL_MODULE, env=env)
    assert folder == tmp_path / "mod" / f"{NETPOL_MODULE}@v0.8.0"
    assert (folder / "pkg/networkpolicy/controller.go").is_file()
