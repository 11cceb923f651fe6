"""Prompt text for trace requests: each hash id becomes a fixed run of words.

A block's text depends only on its id (and the workload's salt), so requests that share ids
share the text and, token for token, the prompt prefix: what RadixAttention caches and what
the gateway's cache-aware tree matches. The words are the emulator tokenizer's whole-word
tokens (one space-led word, one token, stable under a decode/encode round trip), so a block of
`n` tokens is exactly `n` words and the replica sees the trace's token counts.

Requests without hash ids (Azure's trace) get a prompt of their own, seeded by their position.
"""

from __future__ import annotations

import random

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.workload.traces import TraceRequest, iter_blocks

#: Seeds of unique prompts live far from block ids, so they never collide with a trace's ids.
_UNIQUE_BASE = 1 << 40


class PromptSynth:
    """Deterministic prompt text for trace requests, in the emulator's tokenization."""

    def __init__(self, tokenizer: EmulatorTokenizer, *, salt: int = 0) -> None:
        self._tokenizer = tokenizer
        self._salt = salt
        self._blocks: dict[int, list[int]] = {}

    def prompt(self, request: TraceRequest, *, index: int) -> str:
        """The prompt of `request`, the `index`-th of its workload."""
        if not request.hash_ids:
            return self._tokenizer.decode(self._words(_UNIQUE_BASE + index, request.input_tokens))
        ids: list[int] = []
        for block_id, length in iter_blocks(request):
            ids.extend(self._block(block_id, length))
        return self._tokenizer.decode(ids)

    def _block(self, block_id: int, length: int) -> list[int]:
        # Words are drawn one after another from the id's generator, so a shorter block of the
        # same id (a trace's last, partial block) is a prefix of the longer one.
        words = self._blocks.get(block_id, [])
        if len(words) < length:
            words = self._words(block_id, length)
            self._blocks[block_id] = words
        return words[:length]

    def _words(self, seed: int, length: int) -> list[int]:
        rng = random.Random(hash((self._salt, seed)))
        return rng.choices(self._tokenizer.answer_ids, k=length)
