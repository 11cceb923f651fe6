"""The emulator's gRPC interface (smg-grpc-proto's SglangScheduler), alone and behind smg 1.13.0.

Behind the real gateway: smg registers `grpc://` replicas, tokenizes for them, streams their
answers and subscribes to their KV events; its cache-aware policy then routes by the event-driven
index (`event_hit`), so a shared prefix stays on the replica that really holds it. Alone, with
grpcio's own client: bad input is INVALID_ARGUMENT, a crashed replica UNAVAILABLE, a starting
one unhealthy, and the tokenizer arrives as a zip whose SHA-256 the last chunk states.
"""

from __future__ import annotations

import hashlib
import io
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import grpc
import openai
import pytest
from smg_grpc_proto.generated import common_pb2 as common
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as pb_grpc

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.localfleet.router import parse_decisions
from radixfleet.profile import ReplicaProfile
from tests.smg import MODEL, running_smg, shared_prefix_round

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


def grpc_replica(tokenizer: EmulatorTokenizer, *, warm: bool = True) -> Any:
    profile = ReplicaProfile().scaled(time_factor=0.01)
    config = EmulatorConfig(profile=profile, port=0, warm=warm, grpc_port=0)
    return serve_in_thread(config, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def gateway(
    tokenizer: EmulatorTokenizer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, list[RunningEmulator]]]:
    """smg in front of two gRPC replicas: (its URL, its metrics URL, the replicas)."""
    with ExitStack() as stack:
        replicas = [stack.enter_context(grpc_replica(tokenizer)) for _ in range(2)]
        urls = [f"grpc://127.0.0.1:{r.emulator.grpc_port}" for r in replicas]
        # The warm-up slice sends some misses (and one hit in eight) to a replica that holds
        # little, so a young fleet fills evenly; off here, routing follows the index alone.
        warmup_off = ["--worker-warmup-secs", "0", "--worker-warmup-divert-every", "0"]
        log = tmp_path_factory.mktemp("smg") / "smg.log"
        gateway = stack.enter_context(running_smg(urls, log=log, extra=warmup_off))
        yield gateway.url, gateway.metrics_url, replicas


def branch_counts(metrics_url: str) -> dict[str, float]:
    """smg's cache-aware decisions so far, by branch (event_hit, event_miss, tree_match, ...)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return parse_decisions(response.read().decode())


def test_whole_and_streamed_answers_agree_through_the_gateway(
    gateway: tuple[str, str, list[RunningEmulator]],
) -> None:
    url, _, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    messages: Any = [{"role": "user", "content": "Hello over gRPC"}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=7)
    assert whole.usage is not None and whole.usage.completion_tokens == 7
    assert whole.choices[0].finish_reason == "length"
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=7, stream=True)
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content and text


def test_a_natural_end_is_reported_as_a_stop(
    gateway: tuple[str, str, list[RunningEmulator]],
) -> None:
    url, _, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    answer = client.completions.create(model=MODEL, prompt="A short answer, please", max_tokens=500)
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and 0 < answer.usage.completion_tokens < 500


def test_a_shared_prefix_is_routed_by_the_replicas_own_kv_events(
    gateway: tuple[str, str, list[RunningEmulator]],
) -> None:
    url, metrics_url, replicas = gateway
    before = branch_counts(metrics_url).get("event_hit", 0)
    # A pause after each answer: its events reach smg before the next request.
    served, cached = shared_prefix_round(url, replicas, questions=8, pause_s=0.05)
    hits = branch_counts(metrics_url).get("event_hit", 0) - before
    assert served == [0, 8]
    assert cached > 7 * 400  # seven of the eight hit the long system prompt
    assert hits >= 6, f"smg routed by its event index only {hits} times"


def test_n_choices_and_logprobs_through_the_gateway(
    gateway: tuple[str, str, list[RunningEmulator]],
) -> None:
    # smg asks the worker for `n` samples and log probabilities in the request; the replica
    # answered one sample without them.
    url, _, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    messages: Any = [{"role": "user", "content": "Two answers over gRPC"}]
    answer = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, n=2, logprobs=True, top_logprobs=2
    )
    assert sorted(c.index for c in answer.choices) == [0, 1]
    assert answer.usage is not None and answer.usage.completion_tokens == 12
    for choice in answer.choices:
        content = choice.logprobs.content if choice.logprobs else None
        assert content is not None and len(content) == 6
        assert all(len(entry.top_logprobs) == 2 and entry.logprob < 0 for entry in content)


# -- the protocol without the gateway ----------------------------------------------------------


@pytest.fixture
def stub(tokenizer: EmulatorTokenizer) -> Iterator[tuple[Any, RunningEmulator]]:
    with grpc_replica(tokenizer) as replica:
        channel = grpc.insecure_channel(f"127.0.0.1:{replica.emulator.grpc_port}")
        try:
            yield pb_grpc.SglangSchedulerStub(channel), replica  # type: ignore[no-untyped-call]
        finally:
            channel.close()


def generate(stub: Any, ids: list[int], *, stream: bool = False, max_new: int = 4) -> list[Any]:
    request = pb.GenerateRequest(
        request_id=f"r-{time.monotonic_ns()}",
        tokenized=pb.TokenizedInput(input_ids=ids),
        sampling_params=pb.SamplingParams(max_new_tokens=max_new, temperature=1.0),
        stream=stream,
    )
    return list(stub.Generate(request, timeout=10))


def test_generate_streams_chunks_that_add_up_to_the_complete_answer(
    stub: tuple[Any, RunningEmulator],
) -> None:
    client, _ = stub
    responses = generate(client, [5, 6, 7, 8] * 10, stream=True, max_new=12)
    chunks = [r.chunk for r in responses if r.WhichOneof("response") == "chunk"]
    complete = responses[-1].complete
    assert responses[-1].WhichOneof("response") == "complete"
    assert [t for c in chunks for t in c.token_ids] == list(complete.output_ids)
    assert complete.completion_tokens == 12 and complete.prompt_tokens == 40
    assert complete.finish_reason == "length"


@pytest.mark.parametrize(
    ("ids", "max_new"),
    [([], 4), ([1, 2, 3], -1)],
    ids=["no-input-ids", "negative-max-new-tokens"],
)
def test_bad_input_is_invalid_argument(
    stub: tuple[Any, RunningEmulator], ids: list[int], max_new: int
) -> None:
    client, _ = stub
    request = pb.GenerateRequest(
        request_id="bad",
        tokenized=pb.TokenizedInput(input_ids=ids),
        sampling_params=pb.SamplingParams(max_new_tokens=max(max_new, 0)),
    )
    if max_new < 0:  # proto's unsigned field cannot say -1: ask for more than the context
        request.sampling_params.max_new_tokens = 2**31
    with pytest.raises(grpc.RpcError) as caught:
        list(client.Generate(request, timeout=10))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "Traceback" not in (caught.value.details() or "")


def test_a_crashed_replica_is_unavailable_and_a_starting_one_unhealthy(
    stub: tuple[Any, RunningEmulator], tokenizer: EmulatorTokenizer
) -> None:
    client, replica = stub
    assert client.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy is True
    replica.call(lambda: replica.emulator.model.crash(now=replica.emulator.driver.now()))
    time.sleep(0.2)
    with pytest.raises(grpc.RpcError) as caught:
        generate(client, [1, 2, 3, 4])
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    with grpc_replica(tokenizer, warm=False) as cold:  # 0.01 x a real cold start: still starting
        channel = grpc.insecure_channel(f"127.0.0.1:{cold.emulator.grpc_port}")
        starting = pb_grpc.SglangSchedulerStub(channel)  # type: ignore[no-untyped-call]
        answer = starting.HealthCheck(pb.HealthCheckRequest(), timeout=5)
        channel.close()
    assert answer.healthy is False and answer.message == "starting"


def test_the_tokenizer_arrives_as_a_zip_with_its_digest(stub: tuple[Any, RunningEmulator]) -> None:
    client, replica = stub
    chunks = list(client.GetTokenizer(common.GetTokenizerRequest(), timeout=10))
    data = b"".join(c.data for c in chunks)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest()
    assert all(c.sha256 == "" for c in chunks[:-1])
    names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    assert "tokenizer.json" in names
    expected = {p.name for p in replica.emulator.tokenizer.path.iterdir() if p.is_file()}
    assert names == expected


def test_model_and_loads_describe_the_replica(stub: tuple[Any, RunningEmulator]) -> None:
    client, replica = stub
    info = client.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
    assert info.served_model_name == replica.emulator.config.model_name
    assert list(info.eos_token_ids) == [replica.emulator.tokenizer.eos_token_id]
    generate(client, list(range(10, 90)), max_new=2)
    loads = client.GetLoads(pb.GetLoadsRequest(include=["core"]), timeout=5)
    assert loads.dp_rank_count == 1 and loads.loads[0].max_total_num_tokens > 0
    server = client.GetServerInfo(pb.GetServerInfoRequest(), timeout=5)
    assert server.server_type == "grpc" and server.sglang_version == "0.5.23"
    assert server.server_args["served_model_name"] == replica.emulator.config.model_name


def test_a_stop_string_ends_the_answer_through_the_gateway(
    gateway: tuple[str, str, list[RunningEmulator]],
) -> None:
    # smg sends stop strings to the worker and trims the one it matched from the text; the
    # replica must stop there, or every benchmark with stop sequences overstates its load.
    url, _, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    prompt, eos = "Stop at the fifth word", {"ignore_eos": True}
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=120, extra_body=eos)
    assert whole.usage is not None and whole.usage.completion_tokens == 120
    fifth = whole.choices[0].text.split(" ")[5]
    stopped = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=120, stop=[f" {fifth}"], extra_body=eos
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert whole.choices[0].text.startswith(stopped.choices[0].text)
    assert f" {fifth}" not in stopped.choices[0].text
    assert stopped.usage is not None and stopped.usage.completion_tokens <= 6
