"""Trace readers and the pure transformations a replay applies to a trace.

Two public traces (see ../shared/README.md): Azure's LLM inference trace 2023
(`TIMESTAMP,ContextTokens,GeneratedTokens`) gives arrival times and lengths only; Mooncake's
(`timestamp` in ms, `input_length`, `output_length`, `hash_ids`) also gives one hash id per
512-token block of the prompt, equal ids meaning an equal prefix. Both become `TraceRequest`s
with times in seconds from the trace's first request.

The transformations never mutate: they sample whole sessions, compress time to a duration or a
rate, and scale token counts, each returning a new list.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import islice
from pathlib import Path

#: Tokens per hash id in Mooncake's traces.
MOONCAKE_BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when it arrives and how long its prompt and answer are.

    `hash_ids` has one id per block of `block_tokens` prompt tokens (the last block may be
    shorter); it is empty when the trace does not say which prompts share prefixes.
    """

    at: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = MOONCAKE_BLOCK_TOKENS


def read_trace(path: Path, *, limit: int | None = None) -> list[TraceRequest]:
    """Read a trace by its suffix: `.csv` is Azure's format, `.jsonl` Mooncake's."""
    readers = {".csv": read_azure, ".jsonl": read_mooncake}
    reader = readers.get(path.suffix)
    if reader is None:
        raise TraceError(f"{path}: unknown trace format (expected .csv or .jsonl)")
    return reader(path, limit=limit)


def read_azure(path: Path, *, limit: int | None = None) -> list[TraceRequest]:
    """Azure LLM inference trace: `TIMESTAMP,ContextTokens,GeneratedTokens` per line."""
    with path.open(newline="") as handle:
        rows = islice(enumerate(csv.DictReader(handle), start=2), limit)
        parsed = [(_azure_time(path, line, row), row, line) for line, row in rows]
    if not parsed:
        return []
    start = parsed[0][0]
    return [
        TraceRequest(
            at=(when - start).total_seconds(),
            input_tokens=_count(path, line, row.get("ContextTokens")),
            output_tokens=_count(path, line, row.get("GeneratedTokens")),
        )
        for when, row, line in parsed
    ]


def _azure_time(path: Path, line: int, row: dict[str, str]) -> datetime:
    # "2023-11-16 18:15:46.6805900": seven fractional digits, more than datetime parses.
    text = row.get("TIMESTAMP") or ""
    whole, _, fraction = text.partition(".")
    try:
        stamp = datetime.fromisoformat(whole)
        micros = round(float(f"0.{fraction or 0}") * 1e6)
    except ValueError:
        raise TraceError(f"{path}:{line}: bad TIMESTAMP {text!r}") from None
    return stamp.replace(microsecond=min(micros, 999_999))


def read_mooncake(path: Path, *, limit: int | None = None) -> list[TraceRequest]:
    """Mooncake trace: one JSON object per line with `timestamp` in milliseconds."""
    with path.open() as handle:
        lines = islice(enumerate(handle, start=1), limit)
        return [_mooncake_request(path, number, text) for number, text in lines if text.strip()]


def _mooncake_request(path: Path, number: int, text: str) -> TraceRequest:
    try:
        row = json.loads(text)
        ids = tuple(int(i) for i in row["hash_ids"])
        return TraceRequest(
            at=float(row["timestamp"]) / 1000.0,
            input_tokens=_count(path, number, row["input_length"]),
            output_tokens=_count(path, number, row["output_length"]),
            hash_ids=ids,
        )
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise TraceError(f"{path}:{number}: not a Mooncake request: {err}") from None


def _count(path: Path, line: int, value: object) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise TraceError(f"{path}:{line}: expected a token count, got {value!r}") from None
    if number < 0:
        raise TraceError(f"{path}:{line}: negative token count {number}")
    return number


# -- transformations ---------------------------------------------------------------------------


def session_key(request: TraceRequest, index: int) -> int:
    """The conversation a request belongs to.

    In Mooncake's trace the first block (id 0) is a prefix every request shares; the second
    block is where conversations diverge, so later turns of one conversation share it. A
    request without a second block is a session of its own (keyed by its position).
    """
    if len(request.hash_ids) >= 2:
        return request.hash_ids[1]
    return -1 - index


def sample_sessions(
    requests: Sequence[TraceRequest], *, count: int, seed: int
) -> list[TraceRequest]:
    """Whole sessions drawn at random until at least `count` requests, in arrival order."""
    sessions: dict[int, list[TraceRequest]] = {}
    for index, request in enumerate(requests):
        sessions.setdefault(session_key(request, index), []).append(request)
    keys = list(sessions)
    random.Random(seed).shuffle(keys)
    chosen: list[TraceRequest] = []
    for key in keys:
        if len(chosen) >= count:
            break
        chosen.extend(sessions[key])
    return sorted(chosen, key=lambda request: request.at)


def compress(
    requests: Sequence[TraceRequest], *, duration_s: float | None = None, rate: float | None = None
) -> list[TraceRequest]:
    """Shift the first request to 0 and scale time so the requests span `duration_s` seconds,
    or arrive at `rate` requests per second on average. Relative gaps (burstiness) are kept."""
    if not requests:
        return []
    start = min(r.at for r in requests)
    span = max(r.at for r in requests) - start
    target = duration_s if duration_s is not None else _span_for_rate(len(requests), rate)
    factor = target / span if span > 0 else 0.0
    return [replace(r, at=(r.at - start) * factor) for r in requests]


def _span_for_rate(count: int, rate: float | None) -> float:
    if rate is None or rate <= 0:
        raise ValueError("compress() needs a duration or a positive rate")
    return max(count - 1, 0) / rate


def scale_tokens(
    requests: Sequence[TraceRequest], *, factor: float, min_output: int = 1
) -> list[TraceRequest]:
    """Multiply prompt, answer and block lengths by `factor`, keeping the block structure."""
    return [_scaled(r, factor, min_output) for r in requests]


def _scaled(request: TraceRequest, factor: float, min_output: int) -> TraceRequest:
    block = max(1, round(request.block_tokens * factor))
    full_blocks = max(len(request.hash_ids) - 1, 0)
    # At least the full blocks plus one token of the last, so every id still has text.
    floor = full_blocks * block + 1 if request.hash_ids else 1
    return replace(
        request,
        input_tokens=max(round(request.input_tokens * factor), floor),
        output_tokens=max(round(request.output_tokens * factor), min_output),
        block_tokens=block,
    )


def block_lengths(request: TraceRequest) -> list[int]:
    """Tokens of each hash-id block of `request`: full blocks, then the remainder."""
    count = len(request.hash_ids)
    if count == 0:
        return []
    last = request.input_tokens - request.block_tokens * (count - 1)
    return [request.block_tokens] * (count - 1) + [max(last, 1)]


def ideal_hit_rate(requests: Sequence[TraceRequest]) -> float:
    """Share of prompt tokens an infinite prefix cache shared by all would serve from cache.

    A radix cache reuses a prefix only: blocks count as hits up to the first unseen one.
    """
    seen: set[int] = set()
    hit = total = 0
    for request in requests:
        total += request.input_tokens
        for block_id, length in iter_blocks(request):
            if block_id not in seen:
                break
            hit += length
        seen.update(request.hash_ids)
    return hit / total if total else 0.0


def iter_blocks(request: TraceRequest) -> Iterator[tuple[int, int]]:
    """(hash id, tokens) of each block of `request`."""
    return zip(request.hash_ids, block_lengths(request), strict=True)
