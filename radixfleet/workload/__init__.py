"""Workloads for the local fleet: trace readers, prompt synthesis, and an open-loop replayer.

- `traces`: the Azure LLM inference trace (CSV) and Mooncake's (JSONL) as `TraceRequest`s, and
  the pure transformations a replay needs (session sampling, time compression, token scaling);
- `synthetic`: a seeded shared-prefix workload (groups of requests behind common prefixes);
- `prompts`: text for block hash ids, deterministic per id, so equal ids give equal token prefixes;
- `replay`: sends the requests at their times (open loop), streaming, with a progress bar, and
  records per-request TTFT, inter-token latencies, cached tokens and errors;
- `stats`: percentiles, throughput and prefix hit rate per region and per model.
"""

from radixfleet.workload.traces import TraceRequest

__all__ = ["TraceRequest"]
