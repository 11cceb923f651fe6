"""A multi-node emulated replica on loopback, started as the rendered `sglang-multinode` runtime
starts its head and worker: rank 0 serves only once rank 1 has joined it at the dist-init
address, rank 1 serves nothing but its health, and a rank lost ends the other."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from radixfleet.emulator.launch_server import LaunchError, ranks_of
from radixfleet.emulator.multinode import Ranks, RendezvousError, gather, join, watch

WAIT_S = 60.0  # generous: CI shares two cores
LAUNCH = "import sys; from radixfleet.emulator.launch_server import main; sys.exit(main())"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _args(*, rank: int, dist_port: int, port: int) -> list[str]:
    return ["--model-path", "/m", "--host", "127.0.0.1", "--port", str(port), "--nnodes", "2",
            "--node-rank", str(rank), f"--dist-init-addr=127.0.0.1:{dist_port}"]  # fmt: skip


def _status(port: int, path: str = "/health") -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None  # nothing listening


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


@pytest.fixture
def launch() -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(args: list[str]) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], text=True,
                                   env={**os.environ, "RADIXFLEET_EMULATOR_WARM": "1"},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_the_head_serves_only_once_the_worker_joined_and_the_worker_only_its_health(
    launch: object,
) -> None:
    assert callable(launch)
    dist, head_port, worker_port = _free_port(), _free_port(), _free_port()
    head = launch(_args(rank=0, dist_port=dist, port=head_port))
    _until(lambda: _listening(dist), "the head listens for its ranks")
    assert _status(head_port) is None, "rank 0 serves before rank 1 joined"
    assert head.poll() is None
    launch(_args(rank=1, dist_port=dist, port=worker_port))
    _until(lambda: _status(head_port) == 200, "rank 0 healthy once rank 1 joined")
    _until(lambda: _status(worker_port) == 200, "rank 1 healthy")
    assert _status(worker_port, "/v1/models") == 404, "rank 1 serves nothing but its health"
    assert _status(head_port, "/v1/models") == 200


def test_a_worker_exits_when_its_head_goes_away(launch: object) -> None:
    assert callable(launch)
    dist, head_port, worker_port = _free_port(), _free_port(), _free_port()
    head = launch(_args(rank=0, dist_port=dist, port=head_port))
    worker = launch(_args(rank=1, dist_port=dist, port=worker_port))
    _until(lambda: _status(worker_port) == 200, "rank 1 healthy")
    head.kill()
    assert worker.wait(timeout=WAIT_S) == 1
    assert "went away" in worker.stderr.read()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_head_alone_times_out_with_torchs_kind_of_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    ranks = Ranks(nnodes=3, rank=0, host="127.0.0.1", port=0, timeout_s=0.5)
    with pytest.raises(RendezvousError, match=r"DistStoreError: .* 1/3 clients joined"):
        gather(ranks, listener=listener)


def test_a_worker_with_no_head_times_out_with_torchs_kind_of_error() -> None:
    ranks = Ranks(nnodes=2, rank=1, host="127.0.0.1", port=_free_port(), timeout_s=0.5)
    with pytest.raises(RendezvousError, match=r"DistNetworkError: .*\(127.0.0.1, \d+\)"):
        join(ranks)


@pytest.mark.parametrize(
    "hello",
    [b"rank 1 of 3\n", b"rank 0 of 2\n", b"rank 2 of 2\n", b"GET / HTTP/1.1\r\n"],
    ids=["other-nnodes", "a-second-head", "rank-past-nnodes", "a-stranger"],
)
def test_the_head_refuses_a_hello_that_is_not_one_of_its_ranks(hello: bytes) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    ranks = Ranks(nnodes=2, rank=0, host="127.0.0.1", port=port, timeout_s=5)
    gathered: list[socket.socket] = []
    head = threading.Thread(target=lambda: gathered.extend(gather(ranks, listener=listener)))
    head.start()
    with socket.create_connection(("127.0.0.1", port)) as stranger:
        stranger.sendall(hello)
        assert stranger.recv(8) == b"", "the head answered a stranger"
    rank1 = join(Ranks(nnodes=2, rank=1, host="127.0.0.1", port=port, timeout_s=5))
    head.join(WAIT_S)
    assert len(gathered) == 1
    lost: list[str] = []
    watch(gathered, lost.append)
    rank1.close()
    _until(lambda: lost, "the head sees rank 1 go")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr=h:1"], "not a rank"),
        (["--nnodes", "2", "--node-rank", "1"], "needs --dist-init-addr"),
        (["--nnodes", "2", "--dist-init-addr=head-svc"], "not HOST:PORT"),
    ],
    ids=["rank-past-nnodes", "no-address", "no-port"],
)
def test_bad_multinode_flags_stop_the_replica_with_a_clear_error(
    args: list[str], message: str
) -> None:
    with pytest.raises(LaunchError, match=message):
        ranks_of(["--model-path", "/m", *args])


def test_one_node_has_no_ranks_and_the_runtime_flags_parse() -> None:
    assert ranks_of(["--model-path", "/m"]) is None
    ranks = ranks_of(["--model-path", "/m", "--nnodes", "2", "--node-rank", "1",
                      "--dist-init-addr=llama-head-1:5757", "--dist-timeout", "30"])  # fmt: skip
    assert ranks == Ranks(nnodes=2, rank=1, host="llama-head-1", port=5757, timeout_s=30)
