"""A prompt's tokens as the model's own tokenizer counts them, asked of the model's router.

Each router (smg) holds the tokenizer of the model it routes: the local fleet starts it with
`--tokenizer-path`, a cluster's with the InferenceService's `radixfleet.io/tokenizer`
(radixfleet/controllers/routers/spec.py). smg counts without a replica, so a model scaled to
zero is counted without waking it: `POST /v1/tokenize {"model": NAME, "prompt": [TEXT, ...]}`
answers `{"count": [N, ...]}`, where NAME is the name smg registered the tokenizer under (its
source, as `GET /v1/tokenizers` lists it). A revision's router holds one tokenizer; its name is
read once per router and read again when smg says it has no tokenizer of that name. A router
that has none is asked again after `NONE_RETRY_S`, one that failed to answer after
`FAILED_RETRY_S`, not on every request's path. A cluster's router requires the data plane's key:
each call tries the keys it is given in turn past a 401 (two during a rotation).

Whatever goes wrong (no tokenizer, a router restarting, a slow answer) is None: the gate then
charges a bound no tokenizer exceeds (radixfleet/controllers/quota/usage.py: `byte_bound`), never
an estimate a tenant could game.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, TypeGuard

import aiohttp

log = logging.getLogger(__name__)

# Counting sits on every request's path; a router that cannot answer within this is passed over.
TIMEOUT = aiohttp.ClientTimeout(total=2.0, sock_connect=1.0)
NONE_RETRY_S = 10.0  # a router that holds no tokenizer (none was named, or its fetch failed)
FAILED_RETRY_S = 1.0  # one that did not answer, or refused every key: restarting, or rotating
Credentials = Sequence[Mapping[str, str]]  # header sets to try in turn, past a 401


class RouterTokenizers:
    """Counts prompts at routers, by their base URL (`http://host:port`)."""

    def __init__(
        self, session: aiohttp.ClientSession, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.session, self.clock = session, clock
        self._names: dict[str, str] = {}  # router URL -> the name of its tokenizer
        self._none_until: dict[str, float] = {}  # router URL -> when to ask it again

    async def count(
        self, router: str, texts: Sequence[str], *, credentials: Credentials = ({},)
    ) -> int | None:
        """The tokens of `texts` by `router`'s tokenizer, summed; None if it cannot count."""
        if not texts:
            return 0
        try:
            name = await self._name(router, credentials)
            if name is None:
                return None
            return await self._count(router, name, texts, credentials)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            log.debug("%s counted no prompt: %s: %s", router, type(error).__name__, error)
            self._none_until[router] = self.clock() + FAILED_RETRY_S
            return None

    async def _name(self, router: str, credentials: Credentials) -> str | None:
        if router in self._names:
            return self._names[router]
        if self.clock() < self._none_until.get(router, 0.0):
            return None
        answer = await self._call("GET", f"{router}/v1/tokenizers", credentials)
        listed = answer.get("tokenizers") if isinstance(answer, dict) else None
        names = [t.get("name") for t in listed or [] if isinstance(t, dict)]
        if not names or not isinstance(names[0], str):
            wait = NONE_RETRY_S if isinstance(answer, dict) else FAILED_RETRY_S
            self._none_until[router] = self.clock() + wait
            return None
        self._none_until.pop(router, None)
        self._names[router] = names[0]
        return names[0]

    async def _count(
        self, router: str, name: str, texts: Sequence[str], credentials: Credentials
    ) -> int | None:
        body = {"model": name, "prompt": list(texts)}
        answer = await self._call("POST", f"{router}/v1/tokenize", credentials, json=body)
        counts = answer.get("count") if isinstance(answer, dict) else None
        if not _counts(counts) or len(counts) != len(texts):
            self._names.pop(router, None)  # its tokenizer may have changed: read it again
            return None
        return sum(counts)

    async def _call(
        self, method: str, url: str, credentials: Credentials, **options: Any
    ) -> dict[str, Any] | int:
        """The JSON object answered, else the status (401: every key refused)."""
        status = HTTPStatus.UNAUTHORIZED
        for headers in credentials:
            async with self.session.request(
                method, url, timeout=TIMEOUT, headers=headers, **options
            ) as answer:
                if answer.status == HTTPStatus.UNAUTHORIZED:
                    continue
                if answer.status != HTTPStatus.OK:
                    return answer.status
                found = await answer.json(content_type=None)
                return found if isinstance(found, dict) else answer.status
        return status


def _counts(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value
    )
