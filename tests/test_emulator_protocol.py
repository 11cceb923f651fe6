"""Unit tests of the emulator's request parsing, answers and tokenization (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from radixfleet.emulator import answers, logprobs, protocol
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
    outcome = answers.Outcome(completion_tokens=job.completion_tokens, cached_tokens=0,
                              finished=True)  # fmt: skip
    body = answers.format_completion([answers.Sample(job, outcome)], tokenizer)
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


# -- n samples and log probabilities -----------------------------------------------------------


def _finished(job: protocol.Job) -> answers.Sample:
    outcome = answers.Outcome(completion_tokens=job.completion_tokens, cached_tokens=0,
                              finished=True)  # fmt: skip
    return answers.Sample(job, outcome)


def test_n_samples_are_answered_apart_and_the_prompt_is_counted_once(
    tokenizer: EmulatorTokenizer,
) -> None:
    # `n` was ignored: one choice came back, and usage counted one answer.
    body = {"messages": [{"role": "user", "content": "Three ideas"}], "n": 3, "max_tokens": 40}
    job = protocol.parse_chat(body, tokenizer, model="m", context_length=CONTEXT)
    jobs = protocol.samples(job, tokenizer)
    assert [j.index for j in jobs] == [0, 1, 2]
    assert len({j.rid for j in jobs}) == 3 and {j.request_id for j in jobs} == {job.rid}
    assert len({tuple(j.answer_ids) for j in jobs}) == 3  # sampled apart
    answer = answers.format_chat([_finished(j) for j in jobs], tokenizer)
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert answer["id"] == job.rid
    texts = [c["message"]["content"] for c in answer["choices"]]
    assert texts == [tokenizer.decode(j.answer_ids) for j in jobs]
    assert answer["usage"]["prompt_tokens"] == len(job.prompt_ids)
    assert answer["usage"]["completion_tokens"] == sum(j.completion_tokens for j in jobs)


def test_the_first_sample_is_the_answer_without_n(tokenizer: EmulatorTokenizer) -> None:
    one = protocol.parse_completion({"prompt": "Same prompt", "max_tokens": 30}, tokenizer,
                                    model="m")  # fmt: skip
    two = protocol.parse_completion({"prompt": "Same prompt", "max_tokens": 30, "n": 2},
                                    tokenizer, model="m")  # fmt: skip
    assert protocol.samples(two, tokenizer)[0].answer_ids == one.answer_ids


@pytest.mark.parametrize(
    ("route", "fields", "message"),
    [
        ("completion", {"n": 0}, "'n'"),
        ("completion", {"n": protocol.MAX_SAMPLES + 1}, "'n'"),
        ("chat", {"n": "2"}, "'n'"),
        ("chat", {"n": True}, "'n'"),
        ("completion", {"logprobs": protocol.MAX_TOP_LOGPROBS + 1}, "'logprobs'"),
        ("completion", {"logprobs": -1}, "'logprobs'"),
        ("chat", {"logprobs": True, "top_logprobs": 21}, "'top_logprobs'"),
        ("chat", {"top_logprobs": 2}, "needs 'logprobs'"),
        ("chat", {"logprobs": "yes"}, "'logprobs'"),
        ("generate", {"return_logprob": True, "top_logprobs_num": 99}, "'top_logprobs_num'"),
    ],
    ids=["n-zero", "n-too-many", "n-string", "n-bool", "logprobs-too-many", "logprobs-negative",
         "top-logprobs-too-many", "top-without-logprobs", "logprobs-string", "generate-too-many"],
)  # fmt: skip
def test_bad_n_and_logprobs_are_400(
    tokenizer: EmulatorTokenizer, route: str, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError, match=message) as raised:
        if route == "completion":
            protocol.parse_completion({"prompt": "x", **fields}, tokenizer, model="m")
        elif route == "chat":
            body = {"messages": [{"role": "user", "content": "x"}], **fields}
            protocol.parse_chat(body, tokenizer, model="m", context_length=CONTEXT)
        else:
            protocol.parse_generate({"text": "x", **fields}, tokenizer)
    assert raised.value.status == 400


@settings(max_examples=80, deadline=None)
@given(data=st.data(), top=st.integers(0, protocol.MAX_TOP_LOGPROBS), start=st.integers(0, 999))
def test_log_probabilities_are_ordered_below_zero_and_the_same_each_time(
    tokenizer: EmulatorTokenizer, data: st.DataObject, top: int, start: int
) -> None:
    ids = data.draw(st.lists(st.sampled_from(tokenizer.answer_ids), min_size=1, max_size=12))
    found = logprobs.values(ids, tokenizer, top=top, start=start)
    assert found == logprobs.values(ids, tokenizer, top=top, start=start)
    for token, value in zip(ids, found, strict=True):
        assert value.token_id == token and value.logprob < 0
        assert len(value.top) == top and len({i for i, _ in value.top}) == top
        if top:
            assert value.top[0] == (token, value.logprob)  # the sampled token, most likely
        ranked = [lp for _, lp in value.top]
        assert ranked == sorted(ranked, reverse=True) and len(set(ranked)) == len(ranked)


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_logprobs_describe_the_answers_tokens_and_chunks_add_up_to_the_whole(
    tokenizer: EmulatorTokenizer, kind: str
) -> None:
    # They came back null with no error.
    if kind == "completion":
        job = protocol.parse_completion({"prompt": "Hello", "max_tokens": 12, "logprobs": 3},
                                        tokenizer, model="m")  # fmt: skip
    else:
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 12,
                "logprobs": True, "top_logprobs": 3}  # fmt: skip
        job = protocol.parse_chat(body, tokenizer, model="m", context_length=CONTEXT)
    whole = answers.stream_chunk(job, tokenizer, start=0, end=12)["choices"][0]["logprobs"]
    parts = [answers.stream_chunk(job, tokenizer, start=a, end=b)["choices"][0]["logprobs"]
             for a, b in ((0, 5), (5, 12))]  # fmt: skip
    text = tokenizer.decode(job.answer_ids)
    if kind == "completion":
        assert "".join(whole["tokens"]) == text and all(len(t) == 3 for t in whole["top_logprobs"])
        for token, offset in zip(whole["tokens"], whole["text_offset"], strict=True):
            assert text[offset : offset + len(token)] == token
        for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            assert parts[0][field] + parts[1][field] == whole[field], field
    else:
        assert "".join(entry["token"] for entry in whole["content"]) == text
        assert all(len(entry["top_logprobs"]) == 3 for entry in whole["content"])
        assert parts[0]["content"] + parts[1]["content"] == whole["content"]
    answer = (answers.format_completion if kind == "completion" else answers.format_chat)(
        [_finished(job)], tokenizer
    )
    assert answer["choices"][0]["logprobs"] == whole


def test_generate_reports_output_logprobs_when_asked(tokenizer: EmulatorTokenizer) -> None:
    body = {"text": "Hello", "sampling_params": {"max_new_tokens": 6}, "return_logprob": True,
            "top_logprobs_num": 2}  # fmt: skip
    job = protocol.parse_generate(body, tokenizer)
    meta = answers.format_generate(job, _finished(job).outcome, tokenizer, upto=6)["meta_info"]
    assert [entry[1] for entry in meta["output_token_logprobs"]] == job.answer_ids
    assert all(len(alternatives) == 2 for alternatives in meta["output_top_logprobs"])
    plain = protocol.parse_generate({**body, "return_logprob": False}, tokenizer)
    meta = answers.format_generate(plain, _finished(plain).outcome, tokenizer, upto=6)
    assert "output_token_logprobs" not in meta["meta_info"]
