"""Floors in a region the failover has no credentials for: traffic still moves, the floor is
skipped and said (a KeyError would stop the whole tick, weights included)."""

from __future__ import annotations

import logging

import pytest

from radixfleet.controllers.failover.kube import KubeFloors


def test_a_region_without_credentials_gets_no_floor_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    floors = KubeFloors({}, namespace="models")  # no ApiClient for any region
    with caplog.at_level(logging.WARNING, logger="radixfleet.controllers.failover.kube"):
        floors.raise_floor("ap-northeast-1", "llama", 3)
        floors.release_floor("ap-northeast-1", "llama")
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("ap-northeast-1" in m for m in warned)
