"""`fixed_fleet_hit_rates` with a host tier: the twin's replica answers from its host what its
GPU evicted, as a local fleet's replica with `--enable-hierarchical-cache` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixfleet.twin.replay import fixed_fleet_hit_rates
from radixfleet.workload.traces import TraceRequest

DOC_BLOCKS = 3  # 1,536 tokens: the GPU (2,048 tokens) holds one document and a question
QUESTION_TOKENS = 16


def _alternating(count: int) -> list[TraceRequest]:
    """Questions about two documents in turn, one a second: each evicts the other from the GPU."""
    out = []
    for index in range(count):
        document = index % 2
        blocks = tuple(document * DOC_BLOCKS + b for b in range(DOC_BLOCKS))
        out.append(
            TraceRequest(
                at=float(index), input_tokens=DOC_BLOCKS * 512 + QUESTION_TOKENS,
                output_tokens=4, hash_ids=(*blocks, 1_000 + index), block_tokens=512,
            )
        )  # fmt: skip
    return out


@pytest.mark.parametrize(
    ("host_tokens", "hits"),
    [(None, False), (1_024, False), (8_192, True)],
    ids=["gpu-only", "host-too-small", "host-holds-both"],
)
def test_a_host_tier_keeps_what_the_gpu_evicted(
    tmp_path: Path, host_tokens: int | None, hits: bool
) -> None:
    rates = fixed_fleet_hit_rates(
        _alternating(12), routing={"event": "smg_cache_aware"}, replicas=1, kv_tokens=2_048,
        workdir=tmp_path, host_tokens=host_tokens,
    )  # fmt: skip
    # Ten of twelve requests find their document again: 10 * 1,536 of 12 * 1,552 tokens.
    oracle = 10 * DOC_BLOCKS * 512 / (12 * (DOC_BLOCKS * 512 + QUESTION_TOKENS))
    if hits:
        assert rates["event"] == pytest.approx(oracle, rel=0.02)
    else:
        assert rates["event"] < 0.2 * oracle
