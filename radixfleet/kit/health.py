"""/readyz on a small HTTP server of its own, in a daemon thread beside kopf's event loop.

Liveness (/healthz) is kopf's own endpoint (it answers while kopf's loop runs); readiness needs
a question kopf does not ask (does this replica stand in the leader election, leading or ready
to take over?), so it is served here, the answer's body saying which.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY_PATH = "/readyz"


def serve_readiness(
    *, port: int, role: Callable[[], str | None], host: str = "0.0.0.0"
) -> ThreadingHTTPServer:
    """Serve GET /readyz until the process exits: 200 with the replica's `role()`, 503 while
    it has none; returns the server."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != READY_PATH:
                self._answer(404, b"not found\n")
            elif (now := role()) is not None:
                self._answer(200, f"{now}\n".encode())
            else:
                self._answer(503, b"not ready\n")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds is not news

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="readyz").start()
    return server
