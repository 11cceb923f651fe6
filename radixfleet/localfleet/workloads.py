"""The demo's workload: which trace drives which model, in which region, at what rate.

llama-3-1-8b replays Mooncake's conversation trace: whole conversations drawn at random (seeded),
their hash ids turned into prompts that share the trace's prefixes, each conversation kept in
one region (split across the regions serving the model by its session key, as a latency-based
DNS record keeps a client in its region). llama-3-1-70b replays the Azure conversation trace's
arrival gaps and lengths (it says nothing of prefixes, so its prompts share none), and the
prefill/decode pair llama-3-1-70b-pd the trace's next requests. All are
time-compressed to the demo's duration and token-scaled to keep one machine's CPUs ahead of
the emulated H100s. Without the trace files, a synthetic shared-prefix workload stands in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.localfleet.spec import DEMO_PD_MODEL, LocalFleetSpec
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import WorkItem
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload
from radixfleet.workload.traces import (
    TraceRequest,
    compress,
    ideal_hit_rate,
    read_azure,
    read_mooncake,
    sample_sessions,
    scale_tokens,
    session_key,
)

MOONCAKE = "mooncake-conversation.jsonl"
AZURE = "azure-llm-2023-conversation.csv"
#: The shared reference folder beside the checkout (../shared/traces), unless told otherwise.
TRACES_ENV = "RADIXFLEET_TRACES"
MODEL_8B, MODEL_70B = "llama-3-1-8b", "llama-3-1-70b"
PD_SHARE = 0.05  # of the demo's rate, to the P/D pair, on top of the 8B's and the 70B's


def default_traces_dir() -> Path:
    """`$RADIXFLEET_TRACES`, else `../shared/traces` beside the repository."""
    explicit = os.environ.get(TRACES_ENV)
    if explicit:
        return Path(explicit)
    return Path(__file__).resolve().parents[3] / "shared" / "traces"


@dataclass(frozen=True)
class Stream:
    """One model's share of the workload: its source and requests."""

    model: str
    source: str
    requests: list[TraceRequest]

    def describe(self, regions: Sequence[str]) -> dict[str, Any]:
        by_region: dict[str, list[TraceRequest]] = {}
        for index, request in enumerate(self.requests):
            by_region.setdefault(region_of(request, index, regions), []).append(request)
        return {
            "source": self.source,
            "regions": list(regions),
            "requests": len(self.requests),
            "mean_input_tokens": _mean([r.input_tokens for r in self.requests]),
            "mean_output_tokens": _mean([r.output_tokens for r in self.requests]),
            # What a radix cache of unlimited size, one per region, would hit.
            "ideal_prefix_hit_rate": {
                region: round(ideal_hit_rate(requests), 4)
                for region, requests in sorted(by_region.items())
            },
        }


def region_of(request: TraceRequest, index: int, regions: Sequence[str]) -> str:
    """The region a request goes to: all of a session's requests go to the same one."""
    return regions[session_key(request, index) % len(regions)]


@dataclass(frozen=True)
class DemoWorkload:
    """The work items to replay and a description of where they came from."""

    items: list[WorkItem]
    description: dict[str, Any]


def demo_workload(
    *,
    spec: LocalFleetSpec,
    tokenizer: EmulatorTokenizer,
    duration_s: float,
    rate: float,
    token_scale: float,
    seed: int,
    traces_dir: Path,
) -> DemoWorkload:
    """Requests at `rate` per second for `duration_s`: 80% to the 8B model, 20% to the 70B,
    and 5% more to the P/D pair when the fleet serves it."""
    count_8b = max(1, round(rate * duration_s * 0.8))
    count_70b = max(1, round(rate * duration_s * 0.2))
    streams = [
        _mooncake_stream(traces_dir, count=count_8b, seed=seed),
        _azure_stream(traces_dir, count=count_70b),
    ]
    if any(DEMO_PD_MODEL in {m.name for m in r.models} for r in spec.regions):
        count_pd = max(1, round(rate * duration_s * PD_SHARE))
        streams.append(_azure_stream(traces_dir, count=count_pd, model=DEMO_PD_MODEL,
                                     skip=count_70b))  # fmt: skip
    items: list[WorkItem] = []
    description: dict[str, Any] = {}
    for salt, stream in enumerate(streams):
        regions = [r.name for r in spec.regions if stream.model in {m.name for m in r.models}]
        requests = scale_tokens(
            compress(stream.requests, duration_s=duration_s), factor=token_scale, min_output=2
        )
        scaled = Stream(stream.model, stream.source, requests)
        items += _items(scaled, regions=regions, synth=PromptSynth(tokenizer, salt=salt))
        description[stream.model] = scaled.describe(regions)
    items.sort(key=lambda item: item.at)
    return DemoWorkload(items=items, description=description)


def _mooncake_stream(traces_dir: Path, *, count: int, seed: int) -> Stream:
    path = traces_dir / MOONCAKE
    if not path.is_file():
        spec = SharedPrefixSpec(groups=8, requests_per_group=max(1, count // 8), seed=seed)
        synthetic = shared_prefix_workload(spec)[:count]
        return Stream(MODEL_8B, "synthetic shared-prefix (Mooncake trace not found)", synthetic)
    sessions = sample_sessions(read_mooncake(path), count=count, seed=seed)[:count]
    return Stream(MODEL_8B, f"{MOONCAKE}: {count} requests of whole sessions", sessions)


def _azure_stream(traces_dir: Path, *, count: int, model: str = MODEL_70B, skip: int = 0) -> Stream:
    path = traces_dir / AZURE
    if not path.is_file():
        unique = [
            TraceRequest(at=float(i), input_tokens=1024, output_tokens=128) for i in range(count)
        ]
        return Stream(model, "synthetic unique prompts (Azure trace not found)", unique)
    requests = read_azure(path, limit=skip + count)[skip:]
    start = requests[0].at if requests else 0.0
    requests = [replace(r, at=r.at - start) for r in requests]
    which = f"its first {count}" if not skip else f"its {count} after the first {skip}"
    return Stream(model, f"{AZURE}: {which} requests", requests)


def _items(stream: Stream, *, regions: list[str], synth: PromptSynth) -> list[WorkItem]:
    return [
        WorkItem(
            at=request.at,
            region=region_of(request, index, regions),
            model=stream.model,
            prompt=synth.prompt(request, index=index),
            max_tokens=request.output_tokens,
        )
        for index, request in enumerate(stream.requests)
    ]


def _mean(values: Sequence[int]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0
