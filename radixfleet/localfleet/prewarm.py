"""Pre-warming on the local fleet: a new replica is sent the hottest prompt prefixes before its
router sends it traffic (hard problem 2; what to send and when is
radixfleet/controllers/autoscale/prewarm).

The entry sees prompts as text, so a prompt's blocks are slices of its characters
(`radixfleet.prefixes.prompt_blocks`): a pick goes back to the replica as that text.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from radixfleet.twin.interfaces import WarmUp

log = logging.getLogger(__name__)

WARMERS = 2  # warm-up prompts in flight to one replica: it prefills them in one batch


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
