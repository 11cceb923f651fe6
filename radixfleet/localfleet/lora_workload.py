"""The demo's LoRA requests: a tenth more than the demo's rate, to its LoRA model's adapters.

Each request names one of the model's adapters (SGLang's `lora_path`), drawn with a Zipf
popularity (the first adapter most asked for, as S-LoRA's setting has it), and opens with that
adapter's own system prompt (one block shared by its requests) before a question of its own. The
requests are spread evenly over the replay; nothing is loaded at start, so the first request for
each adapter is the one that loads it.
"""

from __future__ import annotations

import random
from typing import Any

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.localfleet.spec import LocalFleetSpec, ModelSpec
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import WorkItem
from radixfleet.workload.traces import TraceRequest

SHARE = 0.1  # of the demo's rate, on top of it
ZIPF_ALPHA = 1.0
BLOCK_TOKENS = 64  # the adapter's system prompt, then the question
ANSWER_TOKENS = 16


def lora_items(
    spec: LocalFleetSpec, tokenizer: EmulatorTokenizer, *, duration_s: float, rate: float,
    seed: int,
) -> tuple[list[WorkItem], dict[str, Any]]:  # fmt: skip
    """The requests to every LoRA model of `spec`, and their description for the summary."""
    items: list[WorkItem] = []
    described: dict[str, Any] = {}
    for region in spec.regions:
        for model in (m for m in region.models if m.lora_adapters):
            found = _model_items(region.name, model, tokenizer, duration_s=duration_s,
                                 rate=rate, seed=seed)  # fmt: skip
            items += found
            described[model.name] = {
                "source": f"synthetic: Zipf({ZIPF_ALPHA:g}) over {len(model.lora_adapters)} "
                "adapters, one system prompt each",
                "requests": len(found),
                "regions": [region.name],
            }
    return items, described


def _model_items(
    region: str, model: ModelSpec, tokenizer: EmulatorTokenizer, *, duration_s: float,
    rate: float, seed: int,
) -> list[WorkItem]:  # fmt: skip
    count = max(1, round(rate * duration_s * SHARE))
    names = [a.name for a in model.lora_adapters]
    weights = [1 / (rank + 1) ** ZIPF_ALPHA for rank in range(len(names))]
    draws = random.Random(seed).choices(range(len(names)), weights=weights, k=count)
    synth = PromptSynth(tokenizer, salt=7)
    items = []
    for index, which in enumerate(draws):
        request = TraceRequest(
            at=duration_s * index / count, input_tokens=2 * BLOCK_TOKENS,
            output_tokens=ANSWER_TOKENS, hash_ids=(1_000_000 + which, 2_000_000 + index),
            block_tokens=BLOCK_TOKENS,
        )  # fmt: skip
        items.append(WorkItem(
            at=request.at, region=region, model=model.name,
            prompt=synth.prompt(request, index=index), max_tokens=ANSWER_TOKENS,
            lora_path=names[which],
        ))  # fmt: skip
    return items
