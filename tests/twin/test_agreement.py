"""The twin and the local fleet agree: one short request sequence at low load through the twin
and through an emulated replica over HTTP gives TTFT and ITL within 10% of each other.

The emulated replica runs the same replica model in real time behind SGLang's HTTP interface;
the twin runs it in virtual time behind its engine. Step times are the calibrated profile's,
slowed down ten times so that loopback HTTP and event-loop jitter stay small against them;
requests are compared one by one and the median gap must be within 10%, so that one request
delayed by a busy machine (CI shares its cores) does not decide the test.
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.profile import ReplicaProfile
from radixfleet.twin.load import parse_scenario
from radixfleet.twin.run import run_scenario

SLOWDOWN = 10.0
PROMPTS = [1000, 2200, 1500, 3000, 1200, 1800]
OUTPUTS = [10, 8, 12, 9, 11, 8]
GAP_S = 2.0  # one request at a time: low load
TOLERANCE = 0.10

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


def _profile_file(folder: Path) -> Path:
    profile = ReplicaProfile().scaled(time_factor=SLOWDOWN)
    path = folder / "slow.yaml"
    path.write_text(json.dumps(profile.model_dump()))
    return path


def _stream(url: str, prompt: str, max_tokens: int) -> tuple[float, float]:
    """TTFT and mean ITL of one streamed completion, seen by the client."""
    parsed = urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    body = {
        "model": "m",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0,
    }
    started = time.perf_counter()
    connection.request(
        "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    assert response.status == 200
    first = last = None
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        text = json.loads(line[5:])["choices"][0].get("text") or ""
        if text:
            now = time.perf_counter()
            first = first or now
            last = now
    connection.close()
    assert first is not None and last is not None
    return first - started, (last - first) / (max_tokens - 1)


def _emulated(tokenizer: EmulatorTokenizer, profile: Path) -> list[tuple[float, float]]:
    rng = random.Random(1)
    config = EmulatorConfig(
        profile=ReplicaProfile.model_validate_json(profile.read_text()),
        served_model_name="m",
        port=0,
        warm=True,
        block_tokens=16,
    )
    out = []
    with serve_in_thread(config, tokenizer=tokenizer) as replica:
        start = time.perf_counter()
        for k, (prompt, output) in enumerate(zip(PROMPTS, OUTPUTS, strict=True)):
            time.sleep(max(0.0, start + k * GAP_S - time.perf_counter()))
            text = tokenizer.decode(rng.choices(tokenizer.answer_ids, k=prompt))
            out.append(_stream(replica.url, text, output))
    return out


def _twin(folder: Path, profile: Path) -> tuple[list[float], list[float]]:
    trace = folder / "sequence.jsonl"
    rows = [
        {
            "timestamp": k * GAP_S * 1000,
            "input_length": p,
            "output_length": o,
            "hash_ids": [k * 1000 + b for b in range(-(-p // 512))],
        }
        for k, (p, o) in enumerate(zip(PROMPTS, OUTPUTS, strict=True))
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scenario = parse_scenario(
        f"""
name: agreement
duration_s: {GAP_S * len(PROMPTS) - 0.01}
regions: [{{name: local, gpu_pools: [{{name: gpu, gpus: 1, warm_gpus: 1}}]}}]
models:
  - {{name: m, profile: {profile}, pool: gpu, min_replicas: 1, initial_replicas: 1,
     max_replicas: 1, block_tokens: 16}}
tenants: [{{name: t, model: m}}]
workload: {{sources: [{{kind: mooncake, tenant: t, path: {trace}}}]}}
policies: [{{name: twin, autoscale: fixed, traffic: static}}]
""",
        source="agreement.yaml",
    )
    outcome = run_scenario(scenario, oracles=False)
    log = outcome.records["twin"].log
    order = sorted(range(len(log)), key=lambda i: log.index[i])
    assert [log.status[i] for i in order] == [0] * len(PROMPTS)
    return [log.ttft[i] for i in order], [log.itl[i] for i in order]


def test_twin_and_emulated_replica_agree(tokenizer: EmulatorTokenizer, tmp_path: Path) -> None:
    profile = _profile_file(tmp_path)
    twin_ttft, twin_itl = _twin(tmp_path, profile)
    emulated = _emulated(tokenizer, profile)
    emu_ttft = [e[0] for e in emulated]
    emu_itl = [e[1] for e in emulated]
    ttft_gap = _median_gap(twin_ttft, emu_ttft)
    itl_gap = _median_gap(twin_itl, emu_itl)
    print(f"TTFT twin {twin_ttft} emulated {emu_ttft}: {ttft_gap:.1%} apart")
    print(f"ITL twin {twin_itl} emulated {emu_itl}: {itl_gap:.1%} apart")
    assert ttft_gap <= TOLERANCE
    assert itl_gap <= TOLERANCE


def _median_gap(twin: list[float], emulated: list[float]) -> float:
    return statistics.median(abs(t / e - 1) for t, e in zip(twin, emulated, strict=True))
