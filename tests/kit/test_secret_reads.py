"""A Secret radixfleet may not read is a missing key to its readers, not a failed reconcile.

Reads of Secrets are held to the names each tenant namespace's Role lists
(radixfleet/render/tenant_access.py). A Tenant that names another Secret must not stop the quota
controller's tick for every tenant, nor the entry's sync: the key reads as absent (and the
Tenant reports ApiKeysResolved=False), while any other failure still raises.
"""

from __future__ import annotations

import logging

import pytest

from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import read_secret_value
from tests.kit.recording import Answer, Recorder, RecordingApiClient

SECRET_GET = ("", "secrets", "get")


def test_a_forbidden_secret_reads_as_missing_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    recorder.fail[SECRET_GET] = [403]
    with caplog.at_level(logging.WARNING):
        assert read_secret_value(RecordingApiClient(recorder), "team-a", "other", "k") is None
    assert "not named in the namespace's secret access" in caplog.text
    assert "team-a/other" in caplog.text


def test_a_readable_secret_still_reads_and_other_failures_still_raise() -> None:
    recorder = Recorder()
    recorder.answers[SECRET_GET] = Answer(data={"k": "c2stYQ=="})  # "sk-a"
    assert read_secret_value(RecordingApiClient(recorder), "team-a", "keys", "k") == "sk-a"
    recorder.fail[SECRET_GET] = [500]
    with pytest.raises(KubeError):
        read_secret_value(RecordingApiClient(recorder), "team-a", "keys", "k")
