"""Shared helpers for the twin's tests: small scenarios written as YAML text."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = """
name: small
seed: 3
duration_s: 90
regions:
  - name: us-east
    gpu_pools: [{name: h100, gpus: 8, warm_gpus: 8}]
  - name: eu-west
    gpu_pools: [{name: h100, gpus: 8, warm_gpus: 8}]
models:
  - name: llama-8b
    pool: h100
    min_replicas: 1
    initial_replicas: 2
    max_replicas: 4
tenants:
  - {name: chat, model: llama-8b}
workload:
  sources:
    - {kind: shared_prefix, tenant: chat, rate_rps: 6, groups: 8, system_prompt_tokens: 1024}
faults:
  - {kind: replica_crash, at_s: 20, region: us-east, model: llama-8b}
  - {kind: region_outage, at_s: 30, region: eu-west, duration_s: 30}
policies:
  - {name: radixfleet}
  - {name: baseline, routing: round_robin, canary: no_analysis, baseline: true}
"""


@pytest.fixture
def small_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path
