"""kmock's Kubernetes emulator on a background thread, for the sync kubernetes client.

The test API server serves custom resources only; ResourceQuotas and Secrets are core
resources, so the adapters that use them are tested against kmock, an HTTP-level emulator of
the Kubernetes API (objects kept in memory, merge-patched, listed and fetched over real HTTP).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kmock
from kubernetes import client


@dataclass(frozen=True)
class Emulated:
    api_client: Any  # kubernetes.client.ApiClient
    emulator: kmock.KubernetesEmulator


@contextmanager
def kmock_kubernetes() -> Iterator[Emulated]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kmock", daemon=True)
    thread.start()
    emulator = kmock.KubernetesEmulator()
    server = kmock.Server(emulator)

    async def start() -> str:
        await emulator.__aenter__()
        await server.__aenter__()
        return str(server.url).rstrip("/")

    async def stop() -> None:
        await server.__aexit__(None, None, None)
        await emulator.__aexit__(None, None, None)

    try:
        url = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
        config = client.Configuration(host=url)
        with client.ApiClient(config) as api:
            yield Emulated(api, emulator)
        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
