"""The emulator's /metrics against sglang 0.5.23: every exported sglang:* family exists there
with the same type, the ones a platform reads most are all present, and each carries the
scheduler labels."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from importlib import resources

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import ReplicaProfile

READ_MOST = [
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:gen_throughput",
    "sglang:max_total_num_tokens",
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:e2e_request_latency_seconds",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:cached_tokens_total",
    "sglang:num_requests_total",
    "sglang:num_aborted_requests_total",
]
SCHEDULER_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}


def sglang_metrics() -> dict[str, str]:
    """name -> type (lower case) from the shipped copy of sglang 0.5.23's metric definitions."""
    text = resources.files("radixfleet.schemas").joinpath("sglang/metrics.json").read_text()
    data = json.loads(text)
    assert data["sglang_version"] == "0.5.23"
    return {name: spec["type"].lower() for name, spec in data["metrics"].items()}


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    config = EmulatorConfig(
        profile=ReplicaProfile().scaled(time_factor=0.001), port=0, warm=True, seed=1
    )
    tokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")
    with serve_in_thread(config, tokenizer=tokenizer) as running:
        shared = "a shared system prompt that every request starts with. " * 20
        for prompt in (shared + "One question?", shared + "Another question?"):
            body = json.dumps({"prompt": prompt, "max_tokens": 8}).encode()
            urllib.request.urlopen(f"{running.url}/v1/completions", data=body, timeout=30).read()
        yield running


@pytest.fixture(scope="module")
def exported(replica: RunningEmulator) -> dict[str, tuple[str, list[Sample]]]:
    with urllib.request.urlopen(f"{replica.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    families = {}
    for family in text_string_to_metric_families(text):
        # The parser strips a counter's _total suffix; sglang's names keep it.
        name = family.name + "_total" if family.type == "counter" else family.name
        families[name] = (family.type, family.samples)
    return families


def test_every_exported_family_exists_in_sglang_with_its_type(
    exported: dict[str, tuple[str, list[Sample]]],
) -> None:
    reference = sglang_metrics()
    ours = {name: kind for name, (kind, _) in exported.items() if name.startswith("sglang:")}
    assert ours, "no sglang:* metric exported"
    unknown = sorted(set(ours) - set(reference))
    assert not unknown, f"not in sglang 0.5.23: {unknown}"
    mismatched = {
        name: (kind, reference[name]) for name, kind in ours.items() if reference[name] != kind
    }
    assert not mismatched


@pytest.mark.parametrize("name", READ_MOST)
def test_read_most_metric_is_exported_with_scheduler_labels(
    exported: dict[str, tuple[str, list[Sample]]], name: str
) -> None:
    assert name in exported
    _, samples = exported[name]
    assert samples
    for sample in samples:
        assert set(sample.labels) >= SCHEDULER_LABELS
        assert sample.labels["engine_type"] == "unified"


def test_values_reflect_served_requests(exported: dict[str, tuple[str, list[Sample]]]) -> None:
    def value(name: str) -> float:
        return next(sample.value for sample in exported[name][1])

    assert value("sglang:num_requests_total") == 2
    assert value("sglang:generation_tokens_total") == 16
    assert value("sglang:cached_tokens_total") > 0
    assert 0 < value("sglang:cache_hit_rate") < 1
    assert value("sglang:max_total_num_tokens") == ReplicaProfile().kv_capacity_tokens
    ttft_count = next(
        s.value
        for s in exported["sglang:time_to_first_token_seconds"][1]
        if s.name.endswith("_count")
    )
    assert ttft_count == 2


def test_http_responses_are_counted_by_endpoint_status_and_method(
    exported: dict[str, tuple[str, list[Sample]]],
) -> None:
    # SGLang's HTTP middleware labels; the canary's error rate reads the generation endpoints.
    samples = exported["sglang:http_responses_total"][1]
    counted = {
        (s.labels["endpoint"], s.labels["status_code"], s.labels["method"]): s.value
        for s in samples
        if s.name.endswith("_total")
    }
    assert counted[("/v1/completions", "200", "POST")] == 2
