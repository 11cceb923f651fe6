"""The open-loop replayer: sends each request at its time, streaming, whatever the answers do.

Open loop, as a trace arrives in production: a slow fleet does not slow the arrivals down, so
queueing shows up in the latencies instead of vanishing into a lower rate. Every request is an
OpenAI `/v1/completions` stream to its region's entry with `stream_options.include_usage`, so
the final chunk reports the prompt's cached tokens (SGLang's `prompt_tokens_details`).

Per request it records: time to first token (first chunk with text), inter-token latencies (the
gap before each later chunk divided by the tokens in it, counted as words: the emulated
replica answers one token per word), tokens, cached tokens, and the error if any. A request
fails on a non-200 answer, a broken connection, a stream without `[DONE]`, or the timeout.

With `retries`, a request answered 5xx before any token is sent again, as OpenAI clients retry
(the SDK retries 5xx and failed connections twice by default); `attempts` records how many
sends it took. A connection that failed before any answer (refused, or closed by an entry
going away) is retried after the SDK's backoff, 0.5 s doubling; a 5xx at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from radixfleet.workload.records import RequestResult, WorkItem

COMPLETIONS_PATH = "/v1/completions"
CONNECTION_BACKOFF_S = 0.5


@dataclass
class _Stream:
    """Folds SSE lines of one completion stream into a RequestResult."""

    result: RequestResult
    last_chunk: float | None = None
    done: bool = False

    def feed(self, line: str, *, now: float) -> None:
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        chunk = json.loads(data)
        if "error" in chunk:
            raise _StreamError(str(chunk["error"].get("message", chunk["error"])))
        self._usage(chunk.get("usage"))
        self._text(_delta_text(chunk), now=now)

    def _text(self, text: str, *, now: float) -> None:
        if not text:
            return
        if self.last_chunk is None:
            self.result.first_token = now
        else:
            tokens = max(1, len(text.split()))
            self.result.itl.extend([(now - self.last_chunk) / tokens] * tokens)
        self.last_chunk = now

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.result.prompt_tokens = int(usage.get("prompt_tokens", 0))
        self.result.output_tokens = int(usage.get("completion_tokens", 0))
        details = usage.get("prompt_tokens_details") or {}
        self.result.cached_tokens = int(details.get("cached_tokens") or 0)


class _StreamError(Exception):
    """An error event inside an otherwise successful stream."""


def _delta_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    text = choice.get("text")
    if text is None:  # a chat chunk
        text = (choice.get("delta") or {}).get("content")
    return text or ""


def request_body(item: WorkItem) -> dict[str, Any]:
    """The completion request for `item`: exactly `max_tokens` tokens, streamed with usage."""
    return {
        "model": item.model,
        "prompt": item.prompt,
        "max_tokens": item.max_tokens,
        "temperature": 0,
        "ignore_eos": True,  # SGLang's extension: answer the trace's length, not a natural one
        "stream": True,
        "stream_options": {"include_usage": True},
        **({"lora_path": item.lora_path} if item.lora_path else {}),
    }


class Replayer:
    """Sends work items open-loop to region entries and collects their results."""

    def __init__(
        self,
        *,
        entries: Mapping[str, str],
        timeout_s: float = 300.0,
        console: Console | None = None,
        lead_s: float = 0.1,
        retries: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.entries = dict(entries)
        self.headers = dict(headers or {})  # on every request: an entry's API key
        self.retries = retries
        self.timeout_s = timeout_s
        self.console = console
        self.lead_s = lead_s  # first send a moment after start, so scheduling is set up

    async def run(self, items: Sequence[WorkItem]) -> list[RequestResult]:
        """Send every item at its time; return results in the items' order."""
        unknown = sorted({i.region for i in items} - set(self.entries))
        if unknown:
            raise ValueError(f"no entry for regions {unknown}")
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            with self._progress(len(items)) as progress:
                return await self._all(session, items, progress)

    def _progress(self, total: int) -> _ProgressBar:
        return _ProgressBar(total=total, console=self.console)

    async def _all(
        self, session: aiohttp.ClientSession, items: Sequence[WorkItem], bar: _ProgressBar
    ) -> list[RequestResult]:
        loop = asyncio.get_running_loop()
        start = loop.time() + self.lead_s

        async def one(item: WorkItem) -> RequestResult:
            await asyncio.sleep(max(0.0, start + item.at - loop.time()))
            result = await self._send(session, item, clock=lambda: loop.time() - start)
            bar.advance(failed=not result.ok)
            return result

        return list(await asyncio.gather(*(one(item) for item in items)))

    async def _send(
        self, session: aiohttp.ClientSession, item: WorkItem, *, clock: Any
    ) -> RequestResult:
        result = await self._attempt(session, item, clock=clock)
        while _retryable(result) and result.attempts <= self.retries:
            if result.unanswered:
                await asyncio.sleep(CONNECTION_BACKOFF_S * 2 ** (result.attempts - 1))
            again = await self._attempt(session, item, clock=clock)
            again.attempts, again.started = result.attempts + 1, result.started
            result = again
        return result

    async def _attempt(
        self, session: aiohttp.ClientSession, item: WorkItem, *, clock: Any
    ) -> RequestResult:
        result = RequestResult(region=item.region, model=item.model, scheduled=item.at)
        result.started = clock()
        url = self.entries[item.region] + COMPLETIONS_PATH
        try:
            async with session.post(url, json=request_body(item), headers=self.headers) as response:
                result.status = response.status
                await _read(response, _Stream(result), clock=clock)
        except aiohttp.ClientConnectionError as err:
            result.error = f"{type(err).__name__}: {err}"
            result.unanswered = result.status == 0
        except (aiohttp.ClientError, TimeoutError, _StreamError, ValueError) as err:
            result.error = result.error or f"{type(err).__name__}: {err}"
        result.ended = clock()
        return result


def _retryable(result: RequestResult) -> bool:
    # Only a server error or a failed connection before any token: a retry then repeats
    # nothing the client has seen.
    return (result.status >= 500 or result.unanswered) and result.first_token is None


async def _read(response: aiohttp.ClientResponse, stream: _Stream, *, clock: Any) -> None:
    if response.status != 200:
        body = await response.text()
        stream.result.error = f"HTTP {response.status}: {body[:200]}"
        return
    async for raw in response.content:
        stream.feed(raw.decode("utf-8", "replace").strip(), now=clock())
    if not stream.done:
        stream.result.error = "stream ended without [DONE]"


class _ProgressBar:
    """A rich progress bar counting finished and failed requests (silent without a console)."""

    def __init__(self, *, total: int, console: Console | None) -> None:
        self.failed = 0
        self._progress = Progress(
            TextColumn("[bold]replaying[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
            disable=console is None,
            transient=False,
        )
        self._task = self._progress.add_task("replay", total=total, failed=0)

    def __enter__(self) -> _ProgressBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def advance(self, *, failed: bool) -> None:
        self.failed += failed
        self._progress.update(self._task, advance=1, failed=self.failed)
