"""Pre-warming on the local fleet: a new replica is sent the hottest prompt prefixes before its
router sends it traffic (hard problem 2; what to send and when is policies/autoscale/prewarm).

The entry sees prompts as text, so here a prompt's blocks are slices of `CHUNK_CHARS`
characters: a prefix of blocks is a prefix of the text, and a pick goes back to the replica as
that text, whose tokens are then a prefix of the real prompts' tokens (all but the last few).
Only text prompts count (`prompt`, `text`): a chat is templated by the replica, and a prefix of
its messages is not a prefix of what the replica caches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from radixfleet.twin.interfaces import WarmUp

log = logging.getLogger(__name__)

CHUNK_CHARS = 256
# English through a Llama tokenizer; only sizes a replica's KV cache in chunks.
CHARS_PER_TOKEN = 4
WARMERS = 2  # warm-up prompts in flight to one replica: it prefills them in one batch
# Only a prompt's opening counts (about 32k tokens): the popularity keeps thousands of prefixes,
# and a huge prompt must not make each of them huge.
MAX_BLOCKS = 512


def prompt_blocks(body: Mapping[str, Any]) -> list[str]:
    """A request's text prompt cut into blocks ([] for a chat or token ids)."""
    text = body.get("prompt", body.get("text"))
    if not isinstance(text, str):
        return []
    end = min(len(text), CHUNK_CHARS * MAX_BLOCKS)
    return [text[i : i + CHUNK_CHARS] for i in range(0, end, CHUNK_CHARS)]


def kv_blocks(kv_capacity_tokens: int) -> int:
    """How many blocks a replica's KV cache holds."""
    return kv_capacity_tokens * CHARS_PER_TOKEN // CHUNK_CHARS


async def warm(session: aiohttp.ClientSession, url: str, warmup: WarmUp) -> int:
    """Send the replica at `url` each prefix of `warmup` (one output token), until done or its
    deadline; how many it answered."""
    texts = iter("".join(str(block) for block in prefix) for prefix in warmup.prefixes)
    answered = 0

    async def send() -> None:
        nonlocal answered
        for text in texts:  # shared: each sender takes the next
            body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
            try:
                async with session.post(f"{url}/generate", json=body) as answer:
                    await answer.read()
                    answered += answer.status == 200
            except aiohttp.ClientError as err:  # the replica is going: it will not serve either
                log.warning("warm-up of %s stopped: %s", url, err)
                return

    try:
        await asyncio.wait_for(asyncio.gather(*(send() for _ in range(WARMERS))), warmup.deadline_s)
    except TimeoutError:
        log.info("warm-up of %s reached its %.0f s deadline", url, warmup.deadline_s)
    return answered
