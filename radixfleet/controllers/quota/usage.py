"""Reading token counts off the request path: what prompts say, usage from answers.

Pure functions and one small stream parser, for the three APIs the region entry serves:
OpenAI chat and completions (`usage`, streamed deltas) and SGLang's `/generate`
(`meta_info.prompt_tokens` and a cumulative `meta_info.completion_tokens` in every chunk).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


def prompt_texts(body: Mapping[str, Any]) -> list[str]:
    """The texts a request asks the model to read: chat messages, a prompt, SGLang's text. All
    of them, whichever the endpoint reads: an empty `messages` beside a completions `prompt`
    must not hide the prompt from the count (a tenant could spend past its budget so)."""
    parts: list[str] = []
    if isinstance(messages := body.get("messages"), list):
        parts += [_content(m.get("content")) for m in messages if isinstance(m, dict)]
    for name in ("prompt", "text"):
        value = body.get(name)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts += [v for v in value if isinstance(v, str)]
    return [part for part in parts if part]


def byte_bound(texts: Iterable[str]) -> int:
    """A count of tokens no tokenizer of the models served exceeds: each text's UTF-8 bytes,
    plus one. A byte-level BPE (Llama 3, GPT) and a SentencePiece with byte fallback (Llama 2,
    Mistral) give every token at least one byte of the text, but for the one a text may gain in
    front (SentencePiece's leading space, or a BOS). Charged when the model's tokenizer cannot
    count (radixfleet/dataplane/tokens.py): about four times an English prompt's tokens, and
    never fewer than any script's (characters/4 undercounted CJK text twelvefold)."""
    return sum(len(text.encode()) + 1 for text in texts)


def id_tokens(body: Mapping[str, Any]) -> int:
    """The tokens of every prompt given as token ids (OpenAI's `prompt`, SGLang's
    `input_ids`), one per id."""
    return sum(len(ids) for ids in token_id_lists(body))


# What a request may generate when it names no cap: SGLang 0.5.23's defaults for completions
# (16) and /generate (128). A chat without max_tokens may run to the end of the context; 512 is
# reserved for it, an assumption that settling with the replica's usage corrects.
DEFAULT_COMPLETION_CAPS = {"/v1/completions": 16, "/generate": 128, "/v1/chat/completions": 512}


def completion_cap(body: Mapping[str, Any], *, path: str) -> int:
    """The completion tokens a request may generate in all: its cap (`max_completion_tokens`,
    `max_tokens`, or /generate's `sampling_params.max_new_tokens`) per answer, times its
    answers (`n`, and one per prompt of a batch). Reserved on admission: without it, 100 small
    prompts asking for long answers ran a tenant at 3.2 times its budget."""
    params = body.get("sampling_params")
    params = params if isinstance(params, Mapping) else {}
    named: list[Any] = [
        body.get("max_completion_tokens"),
        body.get("max_tokens"),
        params.get("max_new_tokens"),
    ]
    caps = [c for c in named if _count(c)]
    cap: int = caps[0] if caps else DEFAULT_COMPLETION_CAPS.get(path, 0)
    return cap * _positive(body.get("n", params.get("n"))) * _prompts(body)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive(value: Any) -> int:
    return value if _count(value) and value > 0 else 1


def _prompts(body: Mapping[str, Any]) -> int:
    """How many prompts a request carries (a batch of texts or of token id lists)."""
    for name in ("prompt", "text", "input_ids"):
        value = body.get(name)
        if isinstance(value, list) and value and all(isinstance(v, str | list) for v in value):
            return len(value)
    return 1


def token_id_lists(body: Mapping[str, Any]) -> list[list[int]]:
    """Every prompt given as token ids: a list of ints, or a batch of them."""
    found: list[list[int]] = []
    for name in ("prompt", "input_ids"):
        value = body.get(name)
        if isinstance(value, list) and _ids(value):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if _ids(v))
    return found


def _ids(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(i, int) and not isinstance(i, bool) for i in value))  # fmt: skip


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass(frozen=True)
class Usage:
    """Exact counts a replica reported; None where it reported none."""

    prompt: int | None = None
    completion: int | None = None


def usage_of_answers(answers: list[Any]) -> Usage:
    """The counts of a batch answered as a JSON list (SGLang's `/generate` with a list of
    texts), summed over its items; None where no item reported one."""
    found = [usage_of(a) for a in answers if isinstance(a, dict)]
    return Usage(_sum([u.prompt for u in found]), _sum([u.completion for u in found]))


def _sum(values: list[int | None]) -> int | None:
    given = [v for v in values if v is not None]
    return sum(given) if given else None


def usage_of(answer: Mapping[str, Any]) -> Usage:
    """The counts in one answer or chunk (OpenAI `usage`, or SGLang's `meta_info`)."""
    for name in ("usage", "meta_info"):
        found = answer.get(name)
        if isinstance(found, dict):
            return Usage(_int(found.get("prompt_tokens")), _int(found.get("completion_tokens")))
    return Usage()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def streamed_tokens(chunk: Mapping[str, Any]) -> int:
    """Tokens one chunk without counts carries: one per choice with new text (SGLang streams
    a token per chunk unless `stream_interval` is raised; the end settles the difference)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return 0
    return sum(1 for c in choices if isinstance(c, dict) and _choice_text(c))


def _choice_text(choice: Mapping[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


@dataclass
class StreamMeter:
    """Counts completion tokens in a server-sent-event stream as its bytes pass through."""

    completion: int = 0
    usage: Usage = field(default_factory=Usage)
    _buffer: bytes = b""

    def feed(self, data: bytes) -> int:
        """Take the next bytes; returns the completion tokens they added."""
        self._buffer += data
        *events, self._buffer = self._buffer.split(b"\n\n")
        before = self.completion
        for payload in _payloads(events):
            self._count(payload)
        return self.completion - before

    def _count(self, chunk: Mapping[str, Any]) -> None:
        found = usage_of(chunk)
        if found.prompt is not None or found.completion is not None:
            self.usage = Usage(
                found.prompt if found.prompt is not None else self.usage.prompt,
                found.completion if found.completion is not None else self.usage.completion,
            )
        if found.completion is not None:  # cumulative where given
            self.completion = max(self.completion, found.completion)
        else:
            self.completion += streamed_tokens(chunk)


def _payloads(events: list[bytes]) -> Iterator[dict[str, Any]]:
    for event in events:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                continue
            try:
                parsed = json.loads(data)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                yield parsed
