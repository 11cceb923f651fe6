"""A synthetic shared-prefix workload: groups of requests behind a common prefix.

Like SGLang's own shared-prefix benchmark (a few long system prompts, many short questions):
`groups` prefixes of `prefix_tokens` each, `requests_per_group` questions of `question_tokens`
behind each, in a seeded random order, arriving as a Poisson process at `rate` per second.
The requests carry hash ids like Mooncake's, so the same prompt synthesis serves both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from radixfleet.workload.traces import TraceRequest

# Question ids start past any prefix id, so a question never shares a prefix block's text.
_QUESTION_BASE = 1 << 32


@dataclass(frozen=True)
class SharedPrefixSpec:
    """The shape of a shared-prefix workload; defaults are a light load for tests."""

    groups: int = 8
    requests_per_group: int = 6
    prefix_tokens: int = 2048
    question_tokens: int = 32
    output_tokens: int = 8
    rate: float = 8.0
    seed: int = 0
    block_tokens: int = 256


def shared_prefix_workload(spec: SharedPrefixSpec) -> list[TraceRequest]:
    """The requests of `spec`, in arrival order."""
    rng = random.Random(spec.seed)
    order = [g for g in range(spec.groups) for _ in range(spec.requests_per_group)]
    rng.shuffle(order)
    blocks = -(-spec.prefix_tokens // spec.block_tokens)  # ceil: the prefix in whole blocks
    at, out = 0.0, []
    for index, group in enumerate(order):
        prefix_ids = tuple(group * blocks + b for b in range(blocks))
        out.append(
            TraceRequest(
                at=at,
                input_tokens=blocks * spec.block_tokens + spec.question_tokens,
                output_tokens=spec.output_tokens,
                hash_ids=(*prefix_ids, _QUESTION_BASE + index),
                block_tokens=spec.block_tokens,
            )
        )
        at += rng.expovariate(spec.rate)
    return out
