"""Run emulated replicas inside the current process, each on its own thread and event loop.

For tests and for in-process fleets: `with serve_in_thread(config) as replica:` binds a free
loopback port (or the configured one), serves until the block ends, then shuts down cleanly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from aiohttp import web

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.server import Emulator
from radixfleet.emulator.tokenizer import EmulatorTokenizer


@dataclass(frozen=True)
class RunningEmulator:
    """A served replica: its base URL, the emulator object and the loop it runs on."""

    url: str
    port: int
    emulator: Emulator
    loop: asyncio.AbstractEventLoop

    def call(self, function: object, *args: object) -> None:
        """Run `function(*args)` on the replica's loop (the model is not thread-safe)."""
        assert callable(function)
        self.loop.call_soon_threadsafe(function, *args)


@contextmanager
def serve_in_thread(
    config: EmulatorConfig, *, tokenizer: EmulatorTokenizer | None = None
) -> Iterator[RunningEmulator]:
    """Serve one emulated replica on a background thread for the duration of the block."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="emulator", daemon=True)
    thread.start()
    try:
        future = asyncio.run_coroutine_threadsafe(_start(config, tokenizer), loop)
        runner, emulator, port = future.result(timeout=60)
        try:
            yield RunningEmulator(
                url=f"http://{config.host}:{port}", port=port, emulator=emulator, loop=loop
            )
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


async def _start(
    config: EmulatorConfig, tokenizer: EmulatorTokenizer | None
) -> tuple[web.AppRunner, Emulator, int]:
    emulator = Emulator(config, tokenizer=tokenizer)
    runner = web.AppRunner(emulator.app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    if port != config.port:
        emulator.config = replace(config, port=port)  # /server_info reports the real port
    return runner, emulator, port
