"""SGLang 0.5.23's answer bodies: /generate, OpenAI completions and chat, whole or streamed.

Pure functions, no I/O. A request with `n` samples is answered as SGLang answers it: one OpenAI
body with a choice per sample (`index`) and usage that counts the prompt once and every
sample's completion, or, from /generate, a list of bodies. Log probabilities, when asked for,
are made up but consistent (`logprobs.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixfleet.emulator import logprobs
from radixfleet.emulator.protocol import Job
from radixfleet.emulator.tokenizer import EmulatorTokenizer


@dataclass(frozen=True, slots=True)
class TierReport:
    """The HiCache tiers a replica has: whether its answers split hits by tier, and its
    storage backend's name (None: no storage tier)."""

    hicache: bool = False
    storage_backend: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the model reported about a finished (or streaming) job."""

    completion_tokens: int
    cached_tokens: int  # every tier's
    finished: bool
    e2e_latency: float = 0.0
    host_cached_tokens: int = 0
    storage_cached_tokens: int = 0
    tiers: TierReport = TierReport()


def cached_tokens_details(outcome: Outcome) -> dict[str, Any] | None:
    """SGLang's `meta_info.cached_tokens_details`: None when nothing was cached, else the hits
    by tier, `device` and `host` (0 without HiCache), and `storage` with the backend's name
    when the replica has a storage backend (the scheduler's `get_cached_tokens_details`)."""
    if outcome.cached_tokens <= 0:
        return None
    host, storage = outcome.host_cached_tokens, outcome.storage_cached_tokens
    details: dict[str, Any] = {"device": outcome.cached_tokens - host - storage, "host": host}
    if outcome.tiers.storage_backend is not None:
        details |= {"storage": storage, "storage_backend": outcome.tiers.storage_backend}
    return details


@dataclass(frozen=True, slots=True)
class Sample:
    """One of a request's `n` generations and what the model reported about it."""

    job: Job
    outcome: Outcome


def finish_reason(job: Job, outcome: Outcome) -> str | None:
    """OpenAI's finish reason once finished."""
    if not outcome.finished:
        return None
    return "stop" if job.stopped else "length"


def usage(samples: Sequence[Sample]) -> dict[str, Any]:
    """OpenAI usage, with SGLang's cached-token report: the prompt once (its samples share it),
    every sample's completion, and every sample's cache hits. SGLang's usage splits no hit by
    tier (`prompt_tokens_details` holds `cached_tokens` alone), so a host or storage hit counts
    in `cached_tokens` with the GPU's."""
    prompt = len(samples[0].job.prompt_ids)
    completion = sum(s.outcome.completion_tokens for s in samples)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(s.outcome.cached_tokens for s in samples)},
    }


def format_generate(
    job: Job, outcome: Outcome, tokenizer: EmulatorTokenizer, *, upto: int
) -> dict[str, Any]:
    """A /generate body (or stream chunk): cumulative text and ids up to `upto` tokens."""
    ids = job.answer_ids[:upto]
    reason: dict[str, Any] | None = None
    if outcome.finished:
        reason = (
            {"type": "stop", "matched": job.matched_stop}
            if job.stopped
            else {"type": "length", "length": len(job.answer_ids)}
        )
    meta: dict[str, Any] = {
        "id": job.rid,
        "finish_reason": reason,
        "prompt_tokens": len(job.prompt_ids),
        "completion_tokens": len(ids) + (len(job.stop_ids) if outcome.finished else 0),
        "cached_tokens": outcome.cached_tokens,
        "cached_tokens_details": cached_tokens_details(outcome),
        "e2e_latency": outcome.e2e_latency,
    }
    if job.top_logprobs is not None:
        meta |= logprobs.generate_fields(job, tokenizer, upto=upto)
    body = {"text": tokenizer.decode(ids), "output_ids": ids, "meta_info": meta}
    return body | ({"index": job.index} if job.samples > 1 else {})


def format_completion(samples: Sequence[Sample], tokenizer: EmulatorTokenizer) -> dict[str, Any]:
    """A whole /v1/completions body, a choice per sample."""
    choices = [_choice(s, tokenizer, text=tokenizer.decode(s.job.answer_ids)) for s in samples]
    return _body(samples, "text_completion", choices)


def format_chat(samples: Sequence[Sample], tokenizer: EmulatorTokenizer) -> dict[str, Any]:
    """A whole /v1/chat/completions body, a choice per sample."""
    choices = []
    for sample in samples:
        text = tokenizer.decode(sample.job.answer_ids)
        message = {"role": "assistant", "content": text, "reasoning_content": None,
                   "tool_calls": None}  # fmt: skip
        choices.append(_choice(sample, tokenizer, message=message))
    return _body(samples, "chat.completion", choices)


def _choice(
    sample: Sample,
    tokenizer: EmulatorTokenizer,
    *,
    text: str | None = None,
    message: dict[str, Any] | None = None,
) -> dict[str, Any]:
    job = sample.job
    content: dict[str, Any] = {"text": text} if message is None else {"message": message}
    return {
        "index": job.index,
        **content,
        "logprobs": _logprobs(job, tokenizer, start=0, end=len(job.answer_ids)),
        "finish_reason": finish_reason(job, sample.outcome),
        "matched_stop": job.matched_stop if job.stopped else None,
    }


def _body(samples: Sequence[Sample], kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    first = samples[0].job
    return {
        "id": first.request_id,
        "object": kind,
        "created": first.created,
        "model": first.model,
        "choices": choices,
        "usage": usage(samples),
    }


def _logprobs(
    job: Job, tokenizer: EmulatorTokenizer, *, start: int, end: int
) -> dict[str, Any] | None:
    """A choice's (or a chunk's) `logprobs` for the answer's tokens [start, end)."""
    if job.top_logprobs is None:
        return None
    if job.kind == "chat":
        return logprobs.chat_field(job, tokenizer, start=start, end=end)
    return logprobs.completion_field(job, tokenizer, start=start, end=end)


def stream_chunk(
    job: Job,
    tokenizer: EmulatorTokenizer,
    *,
    start: int,
    end: int,
    reason: str | None = None,
    role: bool = False,
) -> dict[str, Any]:
    """One OpenAI streaming chunk (completion or chat) carrying the answer's tokens
    [start, end) of one sample."""
    delta = tokenizer.decode(job.answer_ids[start:end]) if end > start else ""
    logprob_field = _logprobs(job, tokenizer, start=start, end=end) if end > start else None
    if job.kind == "chat":
        delta_body: dict[str, Any] = {"content": delta}
        if role:
            delta_body["role"] = "assistant"
        choice: dict[str, Any] = {"index": job.index, "delta": delta_body}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": job.index, "text": delta}
        obj = "text_completion"
    choice |= {"logprobs": logprob_field, "finish_reason": reason}
    return {
        "id": job.request_id,
        "object": obj,
        "created": job.created,
        "model": job.model,
        "choices": [choice],
    }


def usage_chunk(samples: Sequence[Sample]) -> dict[str, Any]:
    """The final usage-only chunk sent when `stream_options.include_usage` is set."""
    first = samples[0].job
    obj = "chat.completion.chunk" if first.kind == "chat" else "text_completion"
    return {
        "id": first.request_id,
        "object": obj,
        "created": first.created,
        "model": first.model,
        "choices": [],
        "usage": usage(samples),
    }
