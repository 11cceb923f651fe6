"""Conformance of the emulated replica's HTTP interface: the openai client, SGLang's native
/generate, the informational routes, the error bodies, the API key and injected faults."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.profile import ReplicaProfile

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAST = ReplicaProfile().scaled(time_factor=0.001)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


def serve(tokenizer: EmulatorTokenizer, **overrides: Any) -> Any:
    """A warm, fast replica on a free port, with `overrides` applied to its config."""
    config = replace(EmulatorConfig(profile=FAST, port=0, warm=True), **overrides)
    return serve_in_thread(config, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def replica(tokenizer: EmulatorTokenizer) -> Iterator[RunningEmulator]:
    with serve(tokenizer) as running:
        yield running


@pytest.fixture
def client(replica: RunningEmulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{replica.url}/v1", api_key="none", max_retries=0)


def http(
    url: str, *, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post_json(url: str, payload: Any, **kwargs: Any) -> tuple[int, Any]:
    status, raw = http(url, body=json.dumps(payload).encode(), **kwargs)
    return status, json.loads(raw) if raw else None


# -- the openai client -------------------------------------------------------------------------


def test_chat_completion_with_openai_client(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello there"}], max_tokens=8
    )
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 8
    assert answer.choices[0].message.content


def test_chat_stream_with_openai_client(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me a story"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert reasons[-1] == "length" and all(reason is None for reason in reasons[:-1])
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    whole = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=12
    )
    assert text == whole.choices[0].message.content  # the same deterministic answer


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_completions_with_openai_client(client: openai.OpenAI, stream: bool) -> None:
    if stream:
        chunks = list(client.completions.create(model=MODEL, prompt="Once", stream=True))
        assert chunks[-1].choices[0].finish_reason in ("length", "stop")
        text = "".join(chunk.choices[0].text for chunk in chunks)
    else:
        answer = client.completions.create(model=MODEL, prompt="Once")
        assert answer.usage is not None and answer.usage.completion_tokens == 16  # default
        text = answer.choices[0].text
    assert text.strip()


def test_natural_stop_without_max_tokens(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}]
    )
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and 16 <= answer.usage.completion_tokens < 256


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL]


def test_shared_prefix_is_reported_as_cached(client: openai.OpenAI) -> None:
    document = "The quick brown fox jumps over the lazy dog. " * 40
    first = client.completions.create(model=MODEL, prompt=document + "Question one?")
    second = client.completions.create(model=MODEL, prompt=document + "Another question?")
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert first.usage is not None and cached is not None
    assert cached >= first.usage.prompt_tokens - 32


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_n_choices_with_openai_client(client: openai.OpenAI, stream: bool) -> None:
    # `n=2` returned one choice.
    messages: Any = [{"role": "user", "content": "Two answers, please"}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, n=2, max_tokens=30)
    assert [c.index for c in whole.choices] == [0, 1]
    texts = [c.message.content for c in whole.choices]
    assert texts[0] != texts[1]
    assert whole.usage is not None and whole.usage.completion_tokens == 60
    if stream:
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=messages, n=2, max_tokens=30, stream=True,
            stream_options={"include_usage": True},
        ))  # fmt: skip
        streamed = ["", ""]
        for chunk in chunks:
            for choice in chunk.choices:
                streamed[choice.index] += choice.delta.content or ""
        assert streamed == texts
        assert {c.choices[0].finish_reason for c in chunks if c.choices} >= {"length"}
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 60
        assert len({chunk.id for chunk in chunks}) == 1


def test_logprobs_with_openai_client(client: openai.OpenAI) -> None:
    # They came back null, with no error.
    messages: Any = [{"role": "user", "content": "Hi"}]
    chat = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, logprobs=True, top_logprobs=3
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 8
    assert "".join(entry.token for entry in content) == chat.choices[0].message.content
    assert all(len(entry.top_logprobs) == 3 and entry.logprob < 0 for entry in content)
    completion = client.completions.create(model=MODEL, prompt="Once", max_tokens=8, logprobs=2)
    found = completion.choices[0].logprobs
    assert found is not None and found.tokens is not None and found.top_logprobs is not None
    assert "".join(found.tokens) == completion.choices[0].text
    assert all(len(alternatives) == 2 for alternatives in found.top_logprobs)


# -- SGLang's native interface -----------------------------------------------------------------


def test_generate_native(replica: RunningEmulator) -> None:
    status, body = post_json(
        f"{replica.url}/generate",
        {"text": "Hello", "sampling_params": {"max_new_tokens": 5}, "return_logprob": False},
    )
    assert status == 200
    assert len(body["output_ids"]) == 5
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert body["meta_info"]["completion_tokens"] == 5


def test_generate_with_n_answers_a_list(replica: RunningEmulator) -> None:
    payload = {"text": "Hello", "sampling_params": {"max_new_tokens": 5, "n": 2}}
    status, body = post_json(f"{replica.url}/generate", payload)
    assert status == 200 and isinstance(body, list) and len(body) == 2
    assert [item["index"] for item in body] == [0, 1]
    assert all(item["meta_info"]["completion_tokens"] == 5 for item in body)


def test_generate_stream_ends_with_done(replica: RunningEmulator) -> None:
    payload = {"text": "Hello", "sampling_params": {"max_new_tokens": 6}, "stream": True}
    status, raw = http(f"{replica.url}/generate", body=json.dumps(payload).encode())
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert len(last["output_ids"]) == 6 and last["meta_info"]["finish_reason"]["type"] == "length"


def test_router_style_body_with_extra_fields(replica: RunningEmulator) -> None:
    payload = {
        "model": None,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 3,
        "stream": False,
        "return_text_in_logprobs": True,
        "no_stop_trim": False,
        "ignore_eos": False,
    }
    status, body = post_json(f"{replica.url}/v1/chat/completions", payload)
    assert status == 200 and body["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("path", ["/model_info", "/get_model_info"])
def test_model_info_points_at_a_loadable_tokenizer(replica: RunningEmulator, path: str) -> None:
    from tokenizers import Tokenizer

    status, raw = http(replica.url + path)
    info = json.loads(raw)
    tokenizer = Tokenizer.from_file(str(Path(info["model_path"]) / "tokenizer.json"))
    text = "Shared prefixes share tokens"
    assert status == 200 and info["is_generation"] is True
    assert tokenizer.encode(text).ids == replica.emulator.tokenizer.encode(text)


def test_server_info_reports_args_and_state(replica: RunningEmulator) -> None:
    status, raw = http(f"{replica.url}/server_info")
    info = json.loads(raw)
    assert status == 200
    assert info["port"] == replica.port and info["max_total_tokens"] == FAST.kv_capacity_tokens
    assert info["internal_states"][0]["max_total_num_tokens"] == FAST.kv_capacity_tokens
    assert info["version"] == "0.5.23" and info["api_key"] is None


def test_v1_loads_is_the_report_smg_polls(replica: RunningEmulator) -> None:
    """smg polls /v1/loads for an HTTP worker's load (then /metrics); gRPC GetLoads says the
    same in protobuf."""
    status, raw = http(f"{replica.url}/v1/loads?include=core,disagg,queues,memory")
    report = json.loads(raw)
    assert status == 200 and report["dp_rank_count"] == 1 and report["version"] == "0.5.23"
    (load,) = report["loads"]
    assert load["max_total_num_tokens"] == FAST.kv_capacity_tokens
    assert 0.0 <= load["token_usage"] <= 1.0
    assert report["aggregate"]["total_reqs"] == load["num_total_reqs"]


@pytest.mark.parametrize("path", ["/health", "/health_generate", "/ready"])
def test_health_routes_answer_200_when_warm(replica: RunningEmulator, path: str) -> None:
    assert http(replica.url + path)[0] == 200


def test_flush_cache(replica: RunningEmulator) -> None:
    status, raw = http(f"{replica.url}/flush_cache", body=b"")
    assert status == 200 and raw.decode().startswith("Cache flushed.")


# -- errors ------------------------------------------------------------------------------------

ERROR_CASES = [
    ("malformed-json", "/v1/chat/completions", b"{not json", 400),
    ("not-an-object", "/v1/completions", b"[1, 2]", 400),
    ("missing-messages", "/v1/chat/completions", b'{"model": null}', 400),
    ("empty-messages", "/v1/chat/completions", b'{"messages": []}', 400),
    ("missing-prompt", "/v1/completions", b'{"max_tokens": 3}', 400),
    ("missing-text", "/generate", b'{"sampling_params": {}}', 400),
    ("bad-max-tokens", "/v1/completions", b'{"prompt": "x", "max_tokens": -1}', 400),
    ("wrong-type", "/v1/completions", b'{"prompt": "x", "max_tokens": "many"}', 400),
    ("bad-message", "/v1/chat/completions", b'{"messages": [{"content": "x"}]}', 400),
    ("model-not-a-string", "/v1/completions", b'{"model": {}, "prompt": "x"}', 400),
    (
        "temperature-not-a-number",
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}], "temperature": "x"}',
        400,
    ),
    ("top-k-not-an-integer", "/generate", b'{"text": "x", "sampling_params": {"top_k": 1.5}}', 400),
    # 10**9 answer tokens were built before the context check: 25 s, then MemoryError.
    (
        "ignore-eos-far-past-context",
        "/generate",
        b'{"text": "x", "sampling_params": {"max_new_tokens": 1000000000, "ignore_eos": true}}',
        400,
    ),
    (
        "chat-ignore-eos-far-past-context",
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000000000,'
        b' "ignore_eos": true}',
        400,
    ),
    ("unknown-model", "/v1/completions", b'{"model": "gpt-9", "prompt": "x"}', 404),
    ("unknown-route", "/v2/everything", b"{}", 404),
]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_bad_input_gets_sglang_error_body(
    replica: RunningEmulator, path: str, body: bytes, status: int
) -> None:
    got, raw = http(replica.url + path, body=body, headers={"Content-Type": "application/json"})
    error = json.loads(raw)["error"]
    assert got == status
    assert set(error) == {"message", "type", "code", "retryable"}
    assert error["code"] == status and error["retryable"] is False
    assert "Traceback" not in error["message"]


def test_prompt_beyond_context_length_is_400(tokenizer: EmulatorTokenizer) -> None:
    short = FAST.model_copy(update={"context_length": 64})
    with serve(tokenizer, profile=short) as running:
        status, body = post_json(
            f"{running.url}/v1/completions", {"prompt": "word " * 200, "max_tokens": 4}
        )
    assert status == 400
    assert "maximum context length of 64 tokens" in body["error"]["message"]


def test_api_key_is_required_except_on_open_paths(tokenizer: EmulatorTokenizer) -> None:
    with serve(tokenizer, api_key="sekret") as running:
        payload = {"prompt": "x", "max_tokens": 2}
        status, body = post_json(f"{running.url}/v1/completions", payload)
        assert (status, body["error"]["code"]) == (401, 401)
        wrong = {"Authorization": "Bearer nope"}
        assert post_json(f"{running.url}/v1/completions", payload, headers=wrong)[0] == 401
        good = openai.OpenAI(base_url=f"{running.url}/v1", api_key="sekret", max_retries=0)
        assert good.completions.create(model=MODEL, prompt="x", max_tokens=2).choices
        for path in ("/health", "/ready", "/metrics"):
            assert http(running.url + path)[0] == 200


def test_full_queue_is_503_and_retryable(tokenizer: EmulatorTokenizer) -> None:
    slow = ReplicaProfile().model_copy(update={"max_queued_requests": 1, "max_running_requests": 1})
    with serve(tokenizer, profile=slow) as running:
        client = openai.OpenAI(base_url=f"{running.url}/v1", api_key="x", max_retries=0)
        # One request runs (long answer), one waits; the third finds the queue full.
        streams = [
            client.completions.create(model=MODEL, prompt="a", max_tokens=2000, stream=True)
            for _ in range(2)
        ]
        status, body = post_json(f"{running.url}/v1/completions", {"prompt": "b"})
        for stream in streams:
            stream.close()
    assert status == 503
    assert body["error"] == {
        "message": "The request queue is full.",
        "type": "ServiceUnavailableError",
        "code": 503,
        "retryable": True,
    }


# -- lifecycle and faults ----------------------------------------------------------------------


def test_cold_start_answers_503_until_ready(tokenizer: EmulatorTokenizer) -> None:
    profile = ReplicaProfile().scaled(time_factor=0.01)  # 0.6 s cold start
    config = EmulatorConfig(profile=profile, port=0)
    with serve_in_thread(config, tokenizer=tokenizer) as running:
        assert http(f"{running.url}/health")[0] == 503
        status, body = post_json(f"{running.url}/v1/completions", {"prompt": "x"})
        assert status == 503 and body["error"]["retryable"] is True
        deadline = time.monotonic() + 10
        while http(f"{running.url}/health")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert post_json(f"{running.url}/v1/completions", {"prompt": "x"})[0] == 200


def test_error_rate_fault_answers_500(tokenizer: EmulatorTokenizer) -> None:
    with serve(tokenizer) as running:
        assert post_json(f"{running.url}/_radixfleet/faults", {"error_rate": 1.0})[0] == 200
        status, body = post_json(f"{running.url}/v1/completions", {"prompt": "x"})
        assert status == 500 and body["error"]["retryable"] is True
        post_json(f"{running.url}/_radixfleet/faults", {})
        assert post_json(f"{running.url}/v1/completions", {"prompt": "x"})[0] == 200


def test_hang_fault_fails_health_at_timeout(tokenizer: EmulatorTokenizer) -> None:
    with serve(tokenizer, health_timeout=0.3) as running:
        status, body = post_json(f"{running.url}/_radixfleet/faults", {"hung": True})
        assert (status, body["health"]) == (200, "hung")
        started = time.monotonic()
        assert http(f"{running.url}/health")[0] == 503
        assert time.monotonic() - started >= 0.25
        post_json(f"{running.url}/_radixfleet/faults", {"hung": False})
        assert http(f"{running.url}/health")[0] == 200


@pytest.mark.parametrize(
    "faults",
    [{"slowdown": -1}, {"slowdown": 1e308}, {"slowdown": 0}, {"error_rate": 1.5}],
    ids=["negative", "absurd", "zero", "error-rate-over-1"],
)
def test_invalid_faults_are_400_and_change_nothing(
    replica: RunningEmulator, faults: dict[str, float]
) -> None:
    status, body = post_json(f"{replica.url}/_radixfleet/faults", faults)
    assert status == 400 and body["error"]["type"] == "BadRequestError"
    _, raw = http(replica.url + "/_radixfleet/faults")
    assert json.loads(raw)["slowdown"] == 1.0


def test_health_answers_while_a_huge_prompt_is_tokenized(replica: RunningEmulator) -> None:
    # An 8 MB prompt takes seconds to tokenize (then 400: past the context). Measured against
    # it, not against a clock: /health answers before that request does.
    order: list[str] = []
    huge = {"prompt": "lorem ipsum " * 700_000, "max_tokens": 1}

    def ask_huge() -> None:
        status, _ = post_json(f"{replica.url}/v1/completions", huge)
        order.append(f"huge {status}")

    worker = threading.Thread(target=ask_huge)
    worker.start()
    time.sleep(0.5)  # the body is in and being tokenized
    status, _ = http(replica.url + "/health")
    order.append(f"health {status}")
    worker.join(timeout=120)
    assert order == ["health 200", "huge 400"]


def test_crash_drops_connections_then_restarts_cold(tokenizer: EmulatorTokenizer) -> None:
    profile = ReplicaProfile().scaled(time_factor=0.002)  # 0.12 s cold start
    with serve(tokenizer, profile=profile) as running:
        assert post_json(f"{running.url}/_radixfleet/crash", {"restart_after": 0.5})[0] == 200
        time.sleep(0.05)
        with pytest.raises((ConnectionError, urllib.error.URLError)):
            http(f"{running.url}/health")
        deadline = time.monotonic() + 10
        while True:
            try:
                if http(f"{running.url}/health")[0] == 200:
                    break
            except (ConnectionError, urllib.error.URLError):
                pass
            assert time.monotonic() < deadline
            time.sleep(0.05)
