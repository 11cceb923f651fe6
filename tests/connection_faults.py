"""Connection failures a stand-in upstream can show the region entries, as the kernel makes them:
a connection reset (not closed) under a request, and an address whose connections never complete.
Shared by the cluster entry's tests (tests/entry/) and the local fleet's (tests/localfleet/).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator

from aiohttp import web


def reset(request: web.Request) -> None:
    """Close `request`'s connection with a reset, not a close (SO_LINGER 0: the kernel drops
    what is unsent and answers with RST), as for a kept-alive connection the router closed just
    as the request came."""
    assert request.transport is not None
    sock = request.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.transport.close()


@contextlib.contextmanager
def never_connecting() -> Iterator[str]:
    """An address whose connections never complete: its listener's accept queue is full, so
    the kernel drops every new SYN, as for an address whose pod is gone (a router replaced, and
    kube-proxy not caught up yet)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        with socket.create_connection(listener.getsockname()):  # fills the queue, never accepted
            yield "http://{}:{}".format(*listener.getsockname())
