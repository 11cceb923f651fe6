"""Unit tests of the emulator's request parsing, answers and tokenization (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from radixfleet.emulator import protocol
from radixfleet.emulator.protocol import ApiError
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer

CONTEXT = 4096


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


words = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC", min_size=1, max_size=9),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(prefix=words, suffix=words)
def test_shared_text_prefix_is_a_shared_token_prefix(
    tokenizer: EmulatorTokenizer, prefix: list[str], suffix: list[str]
) -> None:
    head = " ".join(prefix)
    ids = tokenizer.encode(head)
    assert tokenizer.encode(head + " " + " ".join(suffix))[: len(ids)] == ids


def test_saved_tokenizer_matches_and_carries_a_chat_template(tokenizer: EmulatorTokenizer) -> None:
    saved = Tokenizer.from_file(str(tokenizer.path / "tokenizer.json"))
    prompt = tokenizer.chat_prompt([("system", "Be brief."), ("user", "Hi there!")])
    assert saved.encode(prompt, add_special_tokens=False).ids == tokenizer.encode(prompt)
    assert "chat_template" in (tokenizer.path / "tokenizer_config.json").read_text()


def test_tokenizer_build_is_reused(tokenizer: EmulatorTokenizer) -> None:
    again = load_tokenizer(tokenizer.path.parent)
    assert again.path == tokenizer.path
    assert len(list(Path(tokenizer.path.parent).iterdir())) == 1


def test_answers_round_trip_through_text(tokenizer: EmulatorTokenizer) -> None:
    ids = tokenizer.answer(seed=42, length=50)
    assert tokenizer.encode(tokenizer.decode(ids)) == ids
    assert ids == tokenizer.answer(seed=42, length=50)


@pytest.mark.parametrize(
    ("body", "max_new", "stopped"),
    [
        ({"prompt": "x"}, protocol.COMPLETION_MAX_TOKENS, False),
        ({"prompt": "x", "max_tokens": 300, "ignore_eos": True}, 300, False),
        ({"prompt": [1, 2, 3], "max_tokens": 0}, 0, False),
        ({"prompt": ["only one"], "max_tokens": 5, "stream": True}, 5, False),
    ],
    ids=["default-max-tokens", "ignore-eos", "token-ids-zero-tokens", "single-item-list"],
)
def test_parse_completion(
    tokenizer: EmulatorTokenizer, body: dict[str, Any], max_new: int, stopped: bool
) -> None:
    job = protocol.parse_completion(body, tokenizer, model="m")
    assert (job.max_new_tokens, job.stopped, len(job.answer_ids)) == (max_new, stopped, max_new)


def test_chat_without_max_tokens_stops_naturally(tokenizer: EmulatorTokenizer) -> None:
    body = {"messages": [{"role": "user", "content": "hello"}]}
    job = protocol.parse_chat(body, tokenizer, model="m", context_length=CONTEXT)
    assert job.stopped
    assert (
        protocol.NATURAL_MIN <= len(job.answer_ids) < protocol.NATURAL_MIN + protocol.NATURAL_SPAN
    )
    assert job.max_new_tokens == CONTEXT - len(job.prompt_ids)


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        ("generate", {}),
        ("generate", {"text": 3}),
        ("generate", {"text": "x", "sampling_params": []}),
        ("generate", {"text": "x", "sampling_params": {"max_new_tokens": 1.5}}),
        ("completion", {"prompt": [True, False]}),
        ("completion", {"prompt": "x", "max_tokens": True}),
        ("completion", {"prompt": "x", "stream": "yes"}),
        ("chat", {"messages": "hello"}),
        ("chat", {"messages": [{"role": "user", "content": 5}]}),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "max_tokens": -2}),
    ],
    ids=[
        "generate-nothing",
        "generate-text-number",
        "generate-params-list",
        "generate-float-tokens",
        "completion-bool-ids",
        "completion-bool-max",
        "completion-stream-string",
        "chat-messages-string",
        "chat-content-number",
        "chat-negative-max",
    ],
)
def test_bad_bodies_raise_400(
    tokenizer: EmulatorTokenizer, parse: str, body: dict[str, Any]
) -> None:
    with pytest.raises(ApiError) as info:
        if parse == "generate":
            protocol.parse_generate(body, tokenizer)
        elif parse == "completion":
            protocol.parse_completion(body, tokenizer, model="m")
        else:
            protocol.parse_chat(body, tokenizer, model="m", context_length=CONTEXT)
    assert info.value.status == 400
    assert info.value.body()["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (401, False), (404, False), (500, True), (503, True)]
)
def test_error_body_shape(status: int, retryable: bool) -> None:
    body = ApiError(status, "why").body()
    assert body == {
        "error": {
            "message": "why",
            "type": body["error"]["type"],
            "code": status,
            "retryable": retryable,
        }
    }


@pytest.mark.parametrize(
    ("length", "blocks"), [(0, 0), (15, 0), (16, 1), (33, 2)], ids=lambda v: str(v)
)
def test_block_keys_cover_full_blocks_only(length: int, blocks: int) -> None:
    keys = protocol.block_keys(list(range(length)), 16)
    assert len(keys) == blocks
    assert all(len(key) == 16 for key in keys)


# -- stops: SGLang 0.5.23 ends an answer on a stop string or token, never before its minimum ----

STOP_PROMPT = {"prompt": "Tell me about stops", "max_tokens": 200, "ignore_eos": True}


def _natural(tokenizer: EmulatorTokenizer) -> protocol.Job:
    return protocol.parse_completion(dict(STOP_PROMPT), tokenizer, model="m")


def test_a_stop_string_ends_the_answer_before_it_and_counts_its_tokens(
    tokenizer: EmulatorTokenizer,
) -> None:
    # It was ignored: smg cut the text, but the replica generated and reported all 200 tokens.
    ids = _natural(tokenizer).answer_ids
    word = tokenizer.decode([ids[6]])  # " word", the seventh token
    job = protocol.parse_completion({**STOP_PROMPT, "stop": [word, "never seen"]}, tokenizer,
                                    model="m")  # fmt: skip
    first = tokenizer.decode(ids).find(word)  # it may occur earlier than the seventh token
    assert tokenizer.decode(job.answer_ids) == tokenizer.decode(ids)[:first]
    assert job.completion_tokens == len(job.answer_ids) + 1 <= 7
    outcome = protocol.Outcome(completion_tokens=job.completion_tokens, cached_tokens=0,
                               finished=True)  # fmt: skip
    body = protocol.format_completion(job, outcome, tokenizer.decode(job.answer_ids))
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["matched_stop"] == word
    assert body["usage"]["completion_tokens"] == job.completion_tokens


def test_a_stop_token_ends_the_answer_and_is_not_in_its_text(tokenizer: EmulatorTokenizer) -> None:
    ids = _natural(tokenizer).answer_ids
    job = protocol.parse_completion({**STOP_PROMPT, "stop_token_ids": [ids[4]]}, tokenizer,
                                    model="m")  # fmt: skip
    assert job.answer_ids == ids[: ids.index(ids[4])]
    assert job.stopped and job.matched_stop == ids[4]
    assert job.generated_ids() == [*job.answer_ids, ids[4]]  # the model did generate it


def test_no_stop_counts_before_the_minimum(tokenizer: EmulatorTokenizer) -> None:
    ids = _natural(tokenizer).answer_ids
    body = {**STOP_PROMPT, "stop": [tokenizer.decode([ids[2]])], "stop_token_ids": [ids[3]],
            "min_tokens": 30}  # fmt: skip
    job = protocol.parse_completion(body, tokenizer, model="m")
    assert job.completion_tokens >= 30


def test_the_minimum_outlasts_a_natural_end(tokenizer: EmulatorTokenizer) -> None:
    body = {"text": "Hello", "sampling_params": {"max_new_tokens": 600, "min_new_tokens": 400}}
    job = protocol.parse_generate(body, tokenizer)
    assert 400 <= len(job.answer_ids) < 600 and job.stopped  # natural ends are at most 256


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"stop": ""}, id="empty-stop"),
        pytest.param({"stop": [1]}, id="stop-not-text"),
        pytest.param({"stop_token_ids": [-1]}, id="negative-token"),
        pytest.param({"stop_token_ids": "7"}, id="token-ids-not-a-list"),
        pytest.param({"min_tokens": -2}, id="negative-minimum"),
    ],
)
def test_bad_stops_are_400(tokenizer: EmulatorTokenizer, params: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as caught:
        protocol.parse_completion({**STOP_PROMPT, **params}, tokenizer, model="m")
    assert caught.value.status == 400
