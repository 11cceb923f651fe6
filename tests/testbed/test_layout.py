"""A cluster's run folder must leave room for containerd's socket paths (107 bytes at most):
a too-long folder is refused up front with the reason, instead of containerd exiting at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.layout import MAX_SOCKET_PATH, socket_path_problem

# What a pytest tmp_path under an xdist worker looked like when containerd failed in CI.
XDIST_TMP = "/tmp/pytest-of-root/pytest-36/popen-gw0/test_down_leaves_no_process_mo0/second"


@pytest.mark.parametrize(
    ("run_dir", "refused"),
    [
        pytest.param("/var/tmp/radixfleet-cluster-4242", False, id="the-sessions-folder"),
        pytest.param("out/cluster", False, id="make-cluster"),
        pytest.param(XDIST_TMP, True, id="xdist-tmp-path"),
    ],
)
def test_a_run_folder_too_long_for_containerds_sockets_is_refused(
    run_dir: str, refused: bool
) -> None:
    problem = socket_path_problem(Path(run_dir))
    assert (problem is not None) == refused, problem
    if problem:
        assert run_dir in problem and str(MAX_SOCKET_PATH) in problem
