"""A prompt's tokens as the model's own tokenizer counts them, asked of the model's router.

Each router (smg) holds the tokenizer of the model it routes: the local fleet starts it with
`--tokenizer-path`, a cluster's with the InferenceService's `radixfleet.io/tokenizer`
(radixfleet/controllers/routers/spec.py). smg counts without a replica, so a model scaled to
zero is counted without waking it: `POST /v1/tokenize {"model": NAME, "prompt": [TEXT, ...]}`
answers `{"count": [N, ...]}`, where NAME is the name smg registered the tokenizer under (its
source, as `GET /v1/tokenizers` lists it). A revision's router holds one tokenizer; its name is
read once per router and read again when smg says it has no tokenizer of that name. A router
that has none is asked again after `RETRY_S`, not on every request's path.

Whatever goes wrong (no tokenizer, a router restarting, a slow answer) is None: the gate then
charges a bound no tokenizer exceeds (radixfleet/controllers/quota/usage.py: `byte_bound`), never
an estimate a tenant could game.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

import aiohttp

log = logging.getLogger(__name__)

# Counting sits on every request's path; a router that cannot answer within this is passed over.
TIMEOUT = aiohttp.ClientTimeout(total=2.0, sock_connect=1.0)
RETRY_S = 10.0


class RouterTokenizers:
    """Counts prompts at routers, by their base URL (`http://host:port`)."""

    def __init__(
        self, session: aiohttp.ClientSession, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.session, self.clock = session, clock
        self._names: dict[str, str] = {}  # router URL -> the name of its tokenizer
        self._none_until: dict[str, float] = {}  # router URL -> when to ask it again

    async def count(
        self, router: str, texts: Sequence[str], *, headers: Mapping[str, str] | None = None
    ) -> int | None:
        """The tokens of `texts` by `router`'s tokenizer, summed; None if it cannot count."""
        if not texts:
            return 0
        try:
            name = await self._name(router, headers)
            if name is None:
                return None
            return await self._count(router, name, texts, headers)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            log.debug("%s counted no prompt: %s: %s", router, type(error).__name__, error)
            return None

    async def _name(self, router: str, headers: Mapping[str, str] | None) -> str | None:
        if router in self._names:
            return self._names[router]
        if self.clock() < self._none_until.get(router, 0.0):
            return None
        self._none_until[router] = self.clock() + RETRY_S  # until it names one
        answer = await self._call("GET", f"{router}/v1/tokenizers", headers=headers)
        listed = answer.get("tokenizers") if answer is not None else None
        names = [t.get("name") for t in listed or [] if isinstance(t, dict)]
        if not names or not isinstance(names[0], str):
            return None
        del self._none_until[router]
        self._names[router] = names[0]
        return names[0]

    async def _count(
        self, router: str, name: str, texts: Sequence[str], headers: Mapping[str, str] | None
    ) -> int | None:
        body = {"model": name, "prompt": list(texts)}
        answer = await self._call("POST", f"{router}/v1/tokenize", json=body, headers=headers)
        counts = answer.get("count") if answer is not None else None
        if not _counts(counts) or len(counts) != len(texts):
            self._names.pop(router, None)  # its tokenizer may have changed: read it again
            return None
        return sum(counts)

    async def _call(self, method: str, url: str, **options: Any) -> dict[str, Any] | None:
        async with self.session.request(method, url, timeout=TIMEOUT, **options) as answer:
            if answer.status != 200:
                return None
            found = await answer.json(content_type=None)
            return found if isinstance(found, dict) else None


def _counts(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value
    )
