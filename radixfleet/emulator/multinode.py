"""A multi-node replica's ranks, as SGLang starts them: `--nnodes N --node-rank R
--dist-init-addr HOST:PORT`.

SGLang's ranks meet in torch.distributed's rendezvous at the dist-init address, which rank 0
listens on; a model spread over two nodes serves nothing until every rank has joined, and a rank
that loses the others fails (NCCL errors out, the server exits, Kubernetes restarts the pod).
The emulated replica keeps that shape with a small TCP handshake instead of NCCL:

- rank 0 listens on the address's port, waits for every other rank to say `rank R of N`,
  answers each `ok` once all are in, and only then starts serving HTTP (its /health stays
  unreachable until then, so its pod is not ready and its router has no worker);
- rank R > 0 connects to the head (retrying while the head's Service has no address yet), and
  once answered serves only SGLang's health endpoints (`launch_dummy_health_check_server` in
  sglang 0.5.23's `utils/common.py`: /health, /health_generate and /ping, all 200);
- either side exits when a peer's connection closes: a rank lost is a replica lost.

Waiting longer than `--dist-timeout` (torch's default of 600 s when unset) fails with the kind of
error torch.distributed gives (`DistStoreError` on the head, `DistNetworkError` on a worker).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from radixfleet.sglang_flags import first_value

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0  # torch.distributed's default process-group timeout
RETRY_S = 0.5  # between a worker's attempts to reach a head that is not listening yet
OK = b"ok\n"
HELLO = re.compile(r"rank (?P<rank>\d+) of (?P<nnodes>\d+)")
HEALTH_PATHS = ("/health", "/health_generate", "/ping")


class RendezvousError(Exception):
    """The ranks did not all meet, or a joining rank said something the head cannot accept."""


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in its replica: `rank` of `nnodes`, meeting at host:port."""

    nnodes: int
    rank: int
    host: str
    port: int
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def head(self) -> bool:
        return self.rank == 0

    def hello(self) -> bytes:
        return f"rank {self.rank} of {self.nnodes}\n".encode()


def ranks_from(flags: Mapping[str, list[str]]) -> Ranks | None:
    """The ranks SGLang's flags describe; None for a replica on one node."""
    nnodes = int(first_value(flags, "nnodes") or 1)
    if nnodes <= 1:
        return None
    rank = int(first_value(flags, "node_rank") or 0)
    if not 0 <= rank < nnodes:
        raise RendezvousError(f"--node-rank {rank} is not a rank of --nnodes {nnodes}")
    address = first_value(flags, "dist_init_addr")
    if not address:
        raise RendezvousError("--nnodes > 1 needs --dist-init-addr HOST:PORT")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise RendezvousError(f"--dist-init-addr {address!r} is not HOST:PORT")
    timeout = first_value(flags, "dist_timeout")
    return Ranks(nnodes, rank, host.strip("[]"), int(port),
                 float(timeout) if timeout else DEFAULT_TIMEOUT_S)  # fmt: skip


# ---------------------------------------------------------------- rank 0


def gather(ranks: Ranks, *, listener: socket.socket | None = None) -> list[socket.socket]:
    """Rank 0: wait for every other rank to join at the dist-init port; their connections, each
    answered `ok`. `listener` (already listening) serves tests on a free port."""
    server = listener or socket.create_server(("", ranks.port), reuse_port=False)
    deadline = time.monotonic() + ranks.timeout_s
    joined: dict[int, socket.socket] = {}
    try:
        while len(joined) < ranks.nnodes - 1:
            server.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                peer, _ = server.accept()
            except TimeoutError:
                raise RendezvousError(
                    f"torch.distributed.DistStoreError: Timed out after {ranks.timeout_s:.0f} "
                    f"seconds waiting for clients. {len(joined) + 1}/{ranks.nnodes} clients joined."
                ) from None
            _admit(peer, ranks, joined, deadline)
    finally:
        server.close()
    for peer in joined.values():
        peer.sendall(OK)
    return list(joined.values())


def _admit(peer: socket.socket, ranks: Ranks, joined: dict[int, socket.socket],
           deadline: float) -> None:  # fmt: skip
    """Take a joining rank's hello; a stranger or a second of one rank is dropped and logged."""
    peer.settimeout(max(deadline - time.monotonic(), 0.001))
    try:
        hello = _read_line(peer)
    except OSError:  # TimeoutError among them: a stranger that says nothing
        peer.close()
        return
    said = HELLO.fullmatch(hello)
    rank = int(said["rank"]) if said and int(said["nnodes"]) == ranks.nnodes else 0
    if not 0 < rank < ranks.nnodes or rank in joined:
        log.warning("rendezvous: refused %r (rank 0 of %d waits for ranks 1..%d, once each)",
                    hello, ranks.nnodes, ranks.nnodes - 1)  # fmt: skip
        peer.close()
        return
    peer.settimeout(None)
    joined[rank] = peer
    log.warning("rendezvous: rank %d joined (%d/%d)", rank, len(joined) + 1, ranks.nnodes)


def _read_line(peer: socket.socket, limit: int = 64) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = peer.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


# ---------------------------------------------------------------- rank R > 0


def join(ranks: Ranks) -> socket.socket:
    """Rank R > 0: reach the head (retrying until the timeout, as torch's store client does)
    and wait for every rank to be in; the open connection to the head."""
    deadline = time.monotonic() + ranks.timeout_s
    while True:
        try:
            head = socket.create_connection((ranks.host, ranks.port), timeout=RETRY_S * 4)
            head.sendall(ranks.hello())
            head.settimeout(max(deadline - time.monotonic(), 0.001))
            if _read_line(head) + "\n" == OK.decode():
                head.settimeout(None)
                return head
            head.close()
        except OSError:  # refused, unresolved, reset, or timed out waiting for the others
            pass
        if time.monotonic() >= deadline:
            raise RendezvousError(
                "torch.distributed.DistNetworkError: The client socket has timed out after "
                f"{ranks.timeout_s * 1000:.0f}ms while trying to connect to "
                f"({ranks.host}, {ranks.port})."
            )
        time.sleep(RETRY_S)


def watch(peers: list[socket.socket], on_lost: Callable[[str], None]) -> list[threading.Thread]:
    """Call `on_lost` (once per peer) when a peer's connection closes; daemon threads."""
    threads = [
        threading.Thread(target=_wait_closed, args=(peer, on_lost), daemon=True) for peer in peers
    ]
    for thread in threads:
        thread.start()
    return threads


def _wait_closed(peer: socket.socket, on_lost: Callable[[str], None]) -> None:
    try:
        while peer.recv(64):
            pass
    except OSError:
        pass
    on_lost("a rank of this replica went away")


def health_app() -> web.Application:
    """What a rank R > 0 serves on `--port`: SGLang's dummy health endpoints, nothing else."""

    async def healthy(_: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    for path in HEALTH_PATHS:
        app.router.add_get(path, healthy)
    return app


# ---------------------------------------------------------------- the process


def run(ranks: Ranks, serve_head: Callable[[], None], *, host: str, port: int) -> int:
    """Meet the other ranks, then serve: rank 0 through `serve_head`, the others their health
    alone; exit 1 with torch's kind of error when they do not meet, and at once when a rank
    goes away later."""
    try:
        peers = gather(ranks) if ranks.head else [join(ranks)]
    except RendezvousError as error:
        print(f"launch_server: error: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"rank {ranks.rank} of {ranks.nnodes}: every rank joined at "
          f"{ranks.host}:{ranks.port}", flush=True)  # fmt: skip
    watch(peers, _exit_lost)
    if ranks.head:
        serve_head()
    else:
        web.run_app(health_app(), host=host, port=port, print=None, access_log=None)
    return 0


def _exit_lost(why: str) -> None:
    # A replica missing a rank cannot compute a token: as SGLang's scheduler dies on the NCCL
    # error, the process ends, and Kubernetes restarts it to join again.
    print(f"launch_server: error: {why}; exiting", file=sys.stderr, flush=True)
    os._exit(1)
