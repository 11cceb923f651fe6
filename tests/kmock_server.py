"""kmock's Kubernetes emulator on a background thread, for the sync kubernetes client.

The test API server serves custom resources only; ResourceQuotas, Secrets and Events are core
resources, so the adapters that use them are tested against kmock, an HTTP-level emulator of
the Kubernetes API (objects kept in memory, merge-patched, listed and fetched over real HTTP).
Every request it received stays in `Emulated.emulator` (iterate it) for assertions; its
reactions (`emulator["post /api/v1/namespaces/x/events"] << 403`) answer in place of the state.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import enums, rendering
from kubernetes import client


class Emulator(kmock.KubernetesEmulator):
    """kmock, plus the API server's `metadata.generateName`: a create without a name gets one.

    kmock keys objects by name, so without this the second Event (always `generateName`d)
    would answer 409. The request's raw `body` stays as sent; its parsed `data` gets the name.
    """

    _serial = itertools.count(1)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        data = request.data if request.action == enums.action.CREATE else None
        meta = data.get("metadata") if isinstance(data, dict) else None
        if isinstance(meta, dict) and meta.get("generateName") and not meta.get("name"):
            meta["name"] = f"{meta['generateName']}{next(self._serial):05d}"
        return await super()._handle(request)


@dataclass(frozen=True)
class Emulated:
    api_client: Any  # kubernetes.client.ApiClient
    emulator: Emulator

    def posted(self, path: str) -> list[dict[str, Any]]:
        """The bodies POSTed so far, as sent; fails on a request that was not a POST to `path`."""
        bodies = []
        for request in self.emulator:
            assert (request.method.value, request.url.path) == ("POST", path)
            bodies.append(json.loads(request.body))
        return bodies


@contextmanager
def kmock_kubernetes() -> Iterator[Emulated]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kmock", daemon=True)
    thread.start()
    emulator = Emulator()
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
