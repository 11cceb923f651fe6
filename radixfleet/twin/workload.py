"""The twin's arrivals: every request of a run, as columns, with its prompt built on demand.

A scenario's sources (synthetic or trace) are expanded once into sorted numpy columns: arrival
time, tenant, model, the client's home region, and the uniform draws that later decide its
region, its DNS cache age and its revision. The columns are a pure function of the scenario and
its seed, so every worker process rebuilds the same ones; a request's
:class:`~radixfleet.replica.RequestSpec` (token counts and cache-block keys) is built only by the
process that serves it.

Traces are replayed at a target rate by merging copies of themselves, each shifted in time by a
random offset (circularly over the trace's span) and given its own block-key space, then thinned
to the exact rate; a trace shorter than the run repeats. Block keys identify their whole prefix
(as Mooncake's hash ids do), so equal keys mean a shared prefix.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from radixfleet.replica import RequestSpec
from radixfleet.twin.lora import NO_ADAPTER, draw_adapters, with_adapter
from radixfleet.twin.scenario import (
    LongDocQaSource,
    PoissonSource,
    Scenario,
    SharedPrefixSource,
    Source,
    TenantBurst,
    TraceSource,
)
from radixfleet.workload.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceRequest,
    read_azure,
    read_mooncake,
)

SHARED_DIR = Path(__file__).resolve().parents[3] / "shared"
# `$RADIXFLEET_TRACES` (the local fleet reads the same variable), else ../shared/traces beside
# the checkout; a git worktree elsewhere names the folder through the variable.
TRACES_DIR = Path(os.environ.get("RADIXFLEET_TRACES") or SHARED_DIR / "traces")
DEFAULT_TRACES = {
    "azure": TRACES_DIR / "azure-llm-2023-conversation.csv",
    "mooncake": TRACES_DIR / "mooncake-conversation.jsonl",
}

# Block-key spaces: a source's keys never meet another's, a copy's never another copy's.
_SOURCE_SPACE = 1 << 56
_COPY_SPACE = 1 << 36
_UNIQUE_SPACE = 1 << 30  # per-request keys, past any group or trace key of the same copy
_BURST_COPY_BASE = 1 << 16
_GROUP_STRIDE = 1 << 20  # keys per group (a system prompt, a document) within a copy

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


@dataclass(frozen=True)
class Shape:
    """Sizes of one source's base records: prompt and output tokens, and a group per record."""

    prompt: Ints
    output: Ints
    group: Ints
    trace: Sequence[TraceRequest] = ()


@dataclass
class Arrivals:
    """Every request of a run, sorted by time, one numpy column per field."""

    t: Floats
    tenant: Ints
    model: Ints
    home: Ints
    source: Ints
    record: Ints
    copy: Ints
    u_route: Floats
    u_ttl: Floats
    u_revision: Floats
    adapter: Ints  # the adapter's popularity rank, or NO_ADAPTER (radixfleet.twin.lora)

    def __len__(self) -> int:
        return len(self.t)

    def window(self, start: float, end: float) -> tuple[int, int]:
        """Index range of the requests arriving in [start, end)."""
        lo = int(np.searchsorted(self.t, start, side="left"))
        hi = int(np.searchsorted(self.t, end, side="left"))
        return lo, hi


class Workload:
    """A scenario's arrivals, and the request specs behind them."""

    def __init__(self, scenario: Scenario, *, trace_override: Path | None = None) -> None:
        self.scenario = scenario
        self.trace_override = trace_override
        self.shapes: list[Shape] = []
        self._builders: list[Callable[[int, int, int], RequestSpec]] = []
        self.arrivals = self._build()

    def spec(self, index: int) -> RequestSpec:
        """The request spec of arrival `index` (token counts and block keys)."""
        a = self.arrivals
        source = int(a.source[index])
        spec = self._builders[source](int(a.record[index]), int(a.copy[index]), index)
        adapter = int(a.adapter[index])
        return spec if adapter == NO_ADAPTER else with_adapter(spec, adapter)

    # -- building the columns ----------------------------------------------------------------

    def _build(self) -> Arrivals:
        scenario = self.scenario
        rng = np.random.default_rng([scenario.seed, 1])
        parts: list[tuple[Floats, Ints, Ints, int]] = []
        for index, source in enumerate(scenario.workload.sources):
            shape = self._shape(index, source, rng)
            self.shapes.append(shape)
            self._builders.append(self._builder(index, source, shape))
            rate = _rate(source, shape, scenario.workload.rate_scale)
            times, records, copies = _expand(
                shape, source, rate=rate, start=0.0, end=scenario.duration_s, rng=rng
            )
            parts.append((times, records, copies, index))
            parts.extend(self._bursts(index, source, shape, rate, rng))
        return self._merge(parts, rng)

    def _bursts(
        self, index: int, source: Source, shape: Shape, rate: float, rng: np.random.Generator
    ) -> list[tuple[Floats, Ints, Ints, int]]:
        out = []
        bursts = [f for f in self.scenario.faults if isinstance(f, TenantBurst)]
        for number, burst in enumerate(bursts):
            if burst.tenant != source.tenant:
                continue
            end = min(burst.at_s + burst.duration_s, self.scenario.duration_s)
            times, records, copies = _expand(
                shape, source, rate=rate * (burst.factor - 1), start=burst.at_s, end=end, rng=rng
            )
            out.append((times, records, copies + _BURST_COPY_BASE * (number + 1), index))
        return out

    def _merge(
        self, parts: list[tuple[Floats, Ints, Ints, int]], rng: np.random.Generator
    ) -> Arrivals:
        scenario = self.scenario
        t = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
        source = np.concatenate([np.full(len(p[0]), p[3], dtype=np.int64) for p in parts])
        record = np.concatenate([p[1] for p in parts])
        copy = np.concatenate([p[2] for p in parts])
        order = np.lexsort((record, copy, source, t))  # stable across runs and platforms
        t, source, record, copy = t[order], source[order], record[order], copy[order]
        tenant_of = np.array(
            [_index(scenario.tenants, s.tenant) for s in scenario.workload.sources], dtype=np.int64
        )
        tenant = tenant_of[source]
        model_of = np.array(
            [_index(scenario.models, t_.model) for t_ in scenario.tenants], dtype=np.int64
        )
        model = model_of[tenant]
        n = len(t)
        home = self._homes(model, rng.random(n))
        return Arrivals(
            t=t,
            tenant=tenant,
            model=model,
            home=home,
            source=source,
            record=record,
            copy=copy,
            u_route=rng.random(n),
            u_ttl=rng.random(n),
            u_revision=rng.random(n),
            adapter=draw_adapters(scenario, model),
        )

    def _homes(self, model: Ints, draws: Floats) -> Ints:
        """Each client's nearest region, by the regions' traffic shares among those serving."""
        scenario = self.scenario
        names = [r.name for r in scenario.regions]
        home = np.zeros(len(model), dtype=np.int64)
        for m, spec in enumerate(scenario.models):
            serving = [names.index(r) for r in scenario.model_regions(spec)]
            shares = np.array([scenario.regions[i].traffic_share for i in serving])
            edges = np.cumsum(shares) / shares.sum()
            mask = model == m
            picks = np.searchsorted(edges, draws[mask], side="right")
            home[mask] = np.array(serving)[np.minimum(picks, len(serving) - 1)]
        return home

    # -- sources -----------------------------------------------------------------------------

    def _shape(self, index: int, source: Source, rng: np.random.Generator) -> Shape:
        if isinstance(source, TraceSource):
            return _trace_shape(self._trace_path(source), source.kind)
        if isinstance(source, SharedPrefixSource):
            size = 1 << 16  # records are drawn from a pool; the pool repeats past it
            prompt = np.full(size, source.system_prompt_tokens + source.question_tokens)
            output = np.full(size, source.output_tokens)
            return Shape(prompt, output, rng.integers(0, source.groups, size))
        if isinstance(source, LongDocQaSource):
            return _long_doc_shape(source, rng, block=self._block_of(source))
        return _poisson_shape(source, rng)

    def _block_of(self, source: Source) -> int:
        return self.scenario.model(self.scenario.tenant(source.tenant).model).block_tokens

    def _trace_path(self, source: TraceSource) -> Path:
        if self.trace_override is not None:
            return self.trace_override
        if source.path is not None:
            return Path(source.path)
        return DEFAULT_TRACES[source.kind]

    def _builder(
        self, index: int, source: Source, shape: Shape
    ) -> Callable[[int, int, int], RequestSpec]:
        block = self._block_of(source)
        base = (index + 1) * _SOURCE_SPACE
        if isinstance(source, TraceSource) and source.kind == "mooncake":
            return _mooncake_builder(shape, block=block, base=base)
        if isinstance(source, LongDocQaSource):
            question = source.question_tokens  # the document is the prompt before it
            return _prefixed_builder(
                shape, block=block, base=base, shared_blocks=lambda p: (p - question) // block
            )
        system = source.system_prompt_tokens // block
        return _prefixed_builder(shape, block=block, base=base, shared_blocks=lambda _: system)


def _index(items: Sequence[object], name: str) -> int:
    return next(i for i, item in enumerate(items) if getattr(item, "name", None) == name)


def _rate(source: Source, shape: Shape, scale: float) -> float:
    if isinstance(source, TraceSource):
        if source.rate_rps is not None:
            return source.rate_rps * scale
        return _trace_rate(shape) * scale
    return source.rate_rps * scale


def _trace_rate(shape: Shape) -> float:
    span = _span(shape)
    return len(shape.trace) / span


def _span(shape: Shape) -> float:
    # The trace repeats after its last request plus one mean gap, so its rate is kept.
    last = shape.trace[-1].at if shape.trace else 0.0
    count = max(len(shape.trace), 1)
    return max(last * count / max(count - 1, 1), 1e-9)


def _expand(
    shape: Shape,
    source: Source,
    *,
    rate: float,
    start: float,
    end: float,
    rng: np.random.Generator,
) -> tuple[Floats, Ints, Ints]:
    """Arrival times, base records and copy numbers of one source in [start, end)."""
    if end <= start or rate <= 0:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0), empty, empty
    if isinstance(source, TraceSource):
        return _expand_trace(shape, rate=rate, start=start, end=end, rng=rng)
    count = rng.poisson(rate * (end - start))
    times = np.sort(rng.uniform(start, end, count))
    records = rng.integers(0, len(shape.prompt), count)
    return times, records, np.zeros(count, dtype=np.int64)


def _expand_trace(
    shape: Shape, *, rate: float, start: float, end: float, rng: np.random.Generator
) -> tuple[Floats, Ints, Ints]:
    base_t = np.array([r.at for r in shape.trace])
    span = _span(shape)
    factor = rate / (len(base_t) / span)
    copies = max(1, math.ceil(factor))
    keep = factor / copies
    cycles = range(math.floor(start / span), math.ceil(end / span) + 1)
    times, records, copy_ids = [], [], []
    offsets = rng.uniform(0, span, copies)
    offsets[0] = 0.0  # the first copy is the trace itself, on its own clock
    for c in range(copies):
        shifted = np.mod(base_t + offsets[c], span)
        for n in cycles:
            t = shifted + n * span
            chosen = (t >= start) & (t < end) & (rng.random(len(t)) < keep)
            times.append(t[chosen])
            records.append(np.nonzero(chosen)[0])
            copy_ids.append(np.full(int(chosen.sum()), c + copies * n, dtype=np.int64))
    return np.concatenate(times), np.concatenate(records), np.concatenate(copy_ids)


def _trace_shape(path: Path, kind: str) -> Shape:
    trace = read_mooncake(path) if kind == "mooncake" else read_azure(path)
    trace = sorted(trace, key=lambda r: r.at)
    prompt = np.array([max(r.input_tokens, 1) for r in trace], dtype=np.int64)
    output = np.array([max(r.output_tokens, 1) for r in trace], dtype=np.int64)
    return Shape(prompt, output, np.zeros(len(trace), dtype=np.int64), trace)


def _poisson_shape(source: PoissonSource, rng: np.random.Generator) -> Shape:
    # Log-normal with the Azure conversation trace's mean/median ratios (1155/1020, 211/129).
    size = 1 << 16
    prompt_sigma, output_sigma = 0.5, 0.99
    prompt = rng.lognormal(
        math.log(source.prompt_tokens_mean) - prompt_sigma**2 / 2, prompt_sigma, size
    )
    output = rng.lognormal(
        math.log(source.output_tokens_mean) - output_sigma**2 / 2, output_sigma, size
    )
    prompt_i = np.clip(np.rint(prompt), 1, 32_000).astype(np.int64)
    output_i = np.clip(np.rint(output), 1, 4_000).astype(np.int64)
    return Shape(prompt_i, output_i, np.zeros(size, dtype=np.int64))


def _long_doc_shape(source: LongDocQaSource, rng: np.random.Generator, *, block: int) -> Shape:
    """Records of a document (by Zipf popularity) and a question: the document's length (whole
    blocks, so a document is a prefix of every prompt about it) plus the question's."""
    size = 1 << 16
    low = max(source.document_tokens_min // block, 1)
    high = max(source.document_tokens_max // block, low)
    doc_tokens = rng.integers(low, high + 1, source.documents) * block
    weights = np.arange(1, source.documents + 1, dtype=np.float64) ** -source.zipf_s
    group = rng.choice(source.documents, size=size, p=weights / weights.sum())
    prompt = doc_tokens[group] + source.question_tokens
    return Shape(prompt, np.full(size, source.output_tokens), group.astype(np.int64))


def _prefixed_builder(
    shape: Shape, *, block: int, base: int, shared_blocks: Callable[[int], int]
) -> Callable[[int, int, int], RequestSpec]:
    """Prompts of their group's shared prefix (a system prompt, a document: the first
    `shared_blocks(prompt_tokens)` blocks) and then blocks of their own."""
    prompts, outputs, groups = shape.prompt.tolist(), shape.output.tolist(), shape.group.tolist()
    prefixes: dict[tuple[int, int], tuple[int, ...]] = {}  # one per group, length and copy

    def build(record: int, copy: int, index: int) -> RequestSpec:
        prompt, output = prompts[record], outputs[record]
        full = prompt // block
        shared = min(shared_blocks(prompt), full)
        space = base + copy * _COPY_SPACE
        start = space + groups[record] * _GROUP_STRIDE
        prefix = prefixes.get((start, shared))
        if prefix is None:
            prefix = prefixes[start, shared] = tuple(range(start, start + shared))
        unique = space + _UNIQUE_SPACE + index * 4096
        blocks = prefix + tuple(range(unique, unique + full - shared))
        return RequestSpec(
            rid=str(index),
            prompt_tokens=prompt,
            output_tokens=output,
            max_new_tokens=output,
            prompt_blocks=blocks,
        )

    return build


def _mooncake_builder(
    shape: Shape, *, block: int, base: int
) -> Callable[[int, int, int], RequestSpec]:
    """Mooncake's 512-token hash ids, each split into `512 / block` keys of the model's size."""
    split = MOONCAKE_BLOCK_TOKENS // block
    trace = shape.trace

    def build(record: int, copy: int, index: int) -> RequestSpec:
        request = trace[record]
        prompt = max(request.input_tokens, 1)
        full = prompt // block
        space = base + copy * _COPY_SPACE
        keys = [space + h * split + j for h in request.hash_ids for j in range(split)]
        output = max(request.output_tokens, 1)
        return RequestSpec(
            rid=str(index),
            prompt_tokens=prompt,
            output_tokens=output,
            max_new_tokens=output,
            prompt_blocks=tuple(keys[:full]),
        )

    return build
