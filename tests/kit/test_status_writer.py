"""The one status writer: re-read on a 409, a bounded number of times, and a gone object."""

from __future__ import annotations

import pytest

from radixfleet.kit.errors import ConflictError, KubeError
from radixfleet.kit.kube import CONFLICT_ATTEMPTS, KubeStatus, Resource
from tests.kit.recording import Recorder, RecordingApiClient

POLICIES = Resource("radixfleet.io", "v1alpha1", "canarypolicies")
GET = ("radixfleet.io", "canarypolicies", "get")
WRITE = ("radixfleet.io", "canarypolicies/status", "update")


def writer(recorder: Recorder) -> KubeStatus:
    return KubeStatus(RecordingApiClient(recorder), POLICIES, field_manager="test")


@pytest.mark.parametrize("conflicts", [0, 1, CONFLICT_ATTEMPTS - 1], ids=["none", "one", "most"])
def test_a_conflict_is_re_read_and_written_again(conflicts: int) -> None:
    recorder = Recorder(fail={WRITE: [409] * conflicts})
    writer(recorder).update("ns", "p", lambda status: {**status, "n": 1})
    assert recorder.calls.count(GET) == conflicts + 1  # a fresh read before every write
    assert recorder.calls.count(WRITE) == conflicts + 1


def test_endless_conflicts_end_in_a_temporary_error() -> None:
    recorder = Recorder(fail={WRITE: [409] * CONFLICT_ATTEMPTS})
    with pytest.raises(ConflictError) as raised:
        writer(recorder).replace("ns", "p", {})
    assert raised.value.temporary and raised.value.status == 409


def test_a_gone_object_is_a_404() -> None:
    recorder = Recorder(fail={GET: [404]})
    with pytest.raises(KubeError) as raised:
        writer(recorder).replace("ns", "p", {})
    assert raised.value.status == 404 and not raised.value.temporary
    assert WRITE not in recorder.calls


def test_a_cluster_scoped_object() -> None:
    recorder = Recorder()
    KubeStatus(
        RecordingApiClient(recorder), Resource("radixfleet.io", "v1alpha1", "tenants", False),
        field_manager="test",
    ).replace(None, "t", {"a": 1})  # fmt: skip
    assert recorder.calls == [
        ("radixfleet.io", "tenants", "get"),
        ("radixfleet.io", "tenants/status", "update"),
    ]
