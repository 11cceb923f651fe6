"""Log probabilities for the emulated replica's answers: made up, but shaped and ordered as a
model's are, and the same every time for the same token at the same position.

An emulated replica samples nothing, so there is no true distribution to report. What clients
and gateways depend on is the shape and its invariants, which hold here: every generated token
has a log probability below zero; the alternatives come most likely first, the sampled token
among them (it is the most likely: the emulator answers greedily), and no token twice.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixfleet.emulator.protocol import Job
from radixfleet.emulator.tokenizer import EmulatorTokenizer


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's log probability and its position's most likely tokens."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, log probability), most likely first


def values(
    ids: Sequence[int], tokenizer: EmulatorTokenizer, *, top: int, start: int = 0
) -> list[TokenLogprob]:
    """The log probabilities of `ids`, the answer's tokens from position `start` on, with `top`
    alternatives each."""
    return [_one(token, start + i, top, tokenizer) for i, token in enumerate(ids)]


def _one(token: int, position: int, top: int, tokenizer: EmulatorTokenizer) -> TokenLogprob:
    rng = random.Random((token << 24) ^ position)
    chosen = -rng.uniform(0.01, 2.5)
    drawn = rng.sample(tokenizer.answer_ids, top + 1)  # one spare, in case it drew `token`
    others = [t for t in drawn if t != token][: max(top - 1, 0)]
    ranked = [(token, chosen)] if top else []
    for other in others:
        ranked.append((other, ranked[-1][1] - rng.uniform(0.1, 1.5)))
    return TokenLogprob(token, chosen, tuple(ranked))


def completion_field(
    job: Job, tokenizer: EmulatorTokenizer, *, start: int, end: int
) -> dict[str, Any]:
    """OpenAI completions' `logprobs` for the answer's tokens [start, end): tokens, their log
    probabilities, the alternatives as {token: logprob}, and each token's offset in the text."""
    found = values(job.answer_ids[start:end], tokenizer, top=job.top_logprobs or 0, start=start)
    texts = [tokenizer.decode([t.token_id]) for t in found]
    before = len(tokenizer.decode(job.answer_ids[:start]))
    return {
        "tokens": texts,
        "token_logprobs": [t.logprob for t in found],
        "top_logprobs": [{tokenizer.decode([i]): lp for i, lp in t.top} for t in found],
        "text_offset": [before + n for n in itertools.accumulate([0, *map(len, texts)])][:-1],
    }


def chat_field(job: Job, tokenizer: EmulatorTokenizer, *, start: int, end: int) -> dict[str, Any]:
    """OpenAI chat's `logprobs`: a `content` entry per token of [start, end), with its bytes and
    its alternatives."""
    found = values(job.answer_ids[start:end], tokenizer, top=job.top_logprobs or 0, start=start)

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = [
        entry(t.token_id, t.logprob) | {"top_logprobs": [entry(i, lp) for i, lp in t.top]}
        for t in found
    ]
    return {"content": content, "refusal": None}


def generate_fields(job: Job, tokenizer: EmulatorTokenizer, *, upto: int) -> dict[str, Any]:
    """/generate's `meta_info` fields (`return_logprob`): [logprob, token id, text] per output
    token up to `upto`, and the alternatives of each. The text is null, as SGLang sends it
    unless `return_text_in_logprobs` is set; the prompt's own log probabilities are not
    emulated (SGLang's `input_token_logprobs` is left out)."""
    found = values(job.answer_ids[:upto], tokenizer, top=job.top_logprobs or 0)
    return {
        "output_token_logprobs": [[t.logprob, t.token_id, None] for t in found],
        "output_top_logprobs": [[[lp, i, None] for i, lp in t.top] for t in found],
    }
