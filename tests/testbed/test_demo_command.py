"""`python -m testbed demo` (`make demo-cluster`): the wrapper around testbed/demo.py, which
tests/cluster/test_demo_cluster.py runs on the session's cluster. Here the cluster run is
replaced (it takes minutes and a cluster of its own): what the command does with its answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from radixfleet.demo.run import QUICK_DURATION_S, DemoOptions
from testbed import __main__ as command
from testbed import demo
from testbed.session import UnavailableError


def _summary(failed: int) -> dict[str, Any]:
    failures = [{"region": "local", "model": "m", "error": "503"}] * failed
    return {"overall": {"failed": failed}, "failed_requests": failures}


@pytest.mark.parametrize(("failed", "code"), [(0, 0), (2, 1)], ids=["all-answered", "failures"])
def test_the_demo_fails_when_a_request_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], failed: int, code: int
) -> None:
    ran: list[DemoOptions] = []

    def run(options: DemoOptions, **_: Any) -> dict[str, Any]:
        ran.append(options)
        return _summary(failed)

    monkeypatch.setattr(demo, "run_cluster_demo", run)
    assert command.main(["demo", "--quick", "--seed", "3"]) == code
    (options,) = ran
    assert options.out == Path("out/demo-cluster") and options.seed == 3
    assert options.duration_s == QUICK_DURATION_S
    assert ("2 requests failed" in capsys.readouterr().err) == bool(failed)


def test_no_cluster_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(options: DemoOptions, **_: Any) -> dict[str, Any]:
        raise UnavailableError("no runc")

    monkeypatch.setattr(demo, "run_cluster_demo", run)
    assert command.main(["demo", "--out", str(tmp_path)]) == 1
    assert "no test cluster here: no runc" in capsys.readouterr().err


class _LoggingCluster:
    """Stands in for the cluster's kubectl (the real one runs in tests/cluster/): the entry's
    replicas' logs as `kubectl logs --prefix` prints them."""

    def __init__(self, stdout: str) -> None:
        self.stdout, self.args = stdout, ()

    def kubectl(self, *args: str, check: bool = True) -> Any:
        self.args = args
        return type("Done", (), {"stdout": self.stdout, "returncode": 0})()


def test_the_entrys_warnings_are_kept_with_their_pod_and_nothing_else() -> None:
    logs = (
        "[pod/radixfleet-entry-a/entry] INFO aiohttp.access: 200 POST /v1/chat/completions\n"
        "[pod/radixfleet-entry-a/entry] WARNING radixfleet.entry.server: demo/x-00002 answered "
        "nothing before it failed (ClientOSError); sent again\n"
        "[pod/radixfleet-entry-b/entry] ERROR radixfleet.dataplane.relay: unhandled error\n"
    )
    cluster = _LoggingCluster(logs)
    found = demo.entry_warnings(cluster)  # type: ignore[arg-type]
    assert [line.split("]")[0] for line in found] == [
        "[pod/radixfleet-entry-a/entry",
        "[pod/radixfleet-entry-b/entry",
    ]
    assert (
        "--tail=-1" in cluster.args and "--prefix" in cluster.args
    )  # every line, each with its pod
