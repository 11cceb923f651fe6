"""The emulated replica's dynamic LoRA routes, as sglang 0.5.23 serves them.

``POST /load_lora_adapter`` takes ``{"lora_name", "lora_path", "pinned"}`` and
``POST /unload_lora_adapter`` ``{"lora_name"}``; both answer SGLang's ``LoRAUpdateOutput``
(``success``, ``error_message``, ``loaded_adapters``: every registered adapter's path by name,
with the IPC fields ``rid`` and ``http_worker_ipc`` SGLang's serialiser adds), 200 on success
and 400 on failure. A load answers once the adapter is loaded: the replica model's time for it
(:mod:`radixfleet.replica.lora`), behind any load in progress. Which adapters a replica holds is
read as from SGLang, on ``/v1/models`` (:func:`radixfleet.emulator.info.models_list`).

An unload refuses new requests for the adapter at once and answers once its requests in
flight have finished, as SGLang's does. One simplification: an adapter's rank is
``--max-lora-rank`` (SGLang sizes its pool for it; default 16), since the emulator reads no
adapter files.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from radixfleet.emulator.http_io import read_json
from radixfleet.emulator.protocol import ApiError
from radixfleet.emulator.served import EmulatedReplica
from radixfleet.replica import AdapterSpec, LoraError
from radixfleet.replica.lora import DEFAULT_RANK

#: How often an unload looks whether the adapter's last request has finished.
DRAIN_POLL_S = 0.01


class LoraRoutes:
    """/load_lora_adapter and /unload_lora_adapter over one replica."""

    def __init__(self, replica: EmulatedReplica) -> None:
        self.replica = replica

    async def load(self, request: web.Request) -> web.StreamResponse:
        """Load an adapter; answer when it can serve, or 400 with SGLang's reason."""
        body = await read_json(request)
        adapter = AdapterSpec(
            name=_text(body, "lora_name"),
            path=_text(body, "lora_path"),
            rank=self._rank(),
            pinned=_flag(body, "pinned"),
        )
        driver = self.replica.driver
        try:
            result = self.replica.model.load_adapter(adapter, now=driver.now())
        except LoraError as err:
            return self._answer(success=False, error=str(err))
        await asyncio.sleep(max(0.0, result.ready_at - driver.now()))
        driver.poke()  # requests that waited for this load may run now
        return self._answer(success=True)

    async def unload(self, request: web.Request) -> web.StreamResponse:
        """Unload an adapter: new requests naming it are refused from now on; answer once
        those in flight have finished."""
        body = await read_json(request)
        name = _text(body, "lora_name")
        model = self.replica.model
        try:
            model.unload_adapter(name, now=self.replica.driver.now())
        except LoraError as err:
            return self._answer(success=False, error=str(err))
        while model.adapter_in_use(name):
            await asyncio.sleep(DRAIN_POLL_S)
        return self._answer(success=True)

    def _rank(self) -> int:
        spec = self.replica.config.lora_spec
        return DEFAULT_RANK if spec is None else spec.max_lora_rank or DEFAULT_RANK

    def _answer(self, *, success: bool, error: str = "") -> web.Response:
        lora = self.replica.model.lora
        body: dict[str, Any] = {
            "rid": None,
            "http_worker_ipc": None,
            "success": success,
            "error_message": error,
            # SGLang's tokenizer refuses "LoRA is not enabled" before asking the scheduler,
            # so that answer has no adapter list.
            "loaded_adapters": None if lora is None else lora.pool.paths(),
        }
        return web.json_response(body, status=200 if success else 400)


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise ApiError(400, f"Field '{field}' must be a non-empty string, got {got}.")
    return value


def _flag(body: dict[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"Field '{field}' must be a boolean, got {type(value).__name__}.")
    return value
