"""What clients written against OpenAI's API depend on, checked with the official `openai` SDK.

One list of checks, run against every radixfleet entry: the local fleet's
(`tests/localfleet/test_openai_conformance.py`) and the one deployed in the test cluster
(`tests/cluster/test_data_plane.py`). The SDK parses every answer into its typed models, so a
missing field (a model's `created`), a wrong error shape or a broken stream fails here as it
would fail a user's program. Each check names what it proves; `CHECKS` is parametrised with
readable ids by the tests that use it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

MAX_TOKENS = 8
MESSAGES: Any = [{"role": "user", "content": "Say hello to the conformance test."}]


@dataclass(frozen=True)
class Endpoint:
    """An entry as a client sees it: the API's base URL (…/v1), a tenant's key, its model."""

    base_url: str
    key: str
    model: str

    def client(self, *, key: str | None = None) -> openai.OpenAI:
        # No retries: a check sees the first answer, as a strict client would.
        return openai.OpenAI(base_url=self.base_url, api_key=key or self.key, max_retries=0,
                             timeout=600.0)  # fmt: skip


def models_are_listed_and_retrieved(endpoint: Endpoint) -> None:
    client = endpoint.client()
    listed = {model.id: model for model in client.models.list()}
    assert endpoint.model in listed, listed
    found = client.models.retrieve(endpoint.model)
    assert found.id == endpoint.model and found.object == "model"
    assert found.created > 0 and found.owned_by
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def a_chat_is_answered_with_its_usage(endpoint: Endpoint) -> None:
    answer = endpoint.client().chat.completions.create(
        model=endpoint.model, messages=MESSAGES, max_tokens=MAX_TOKENS
    )
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("length", "stop")
    usage = answer.usage
    assert usage is not None and 0 < usage.completion_tokens <= MAX_TOKENS
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def a_streamed_chat_ends_with_its_usage(endpoint: Endpoint) -> None:
    chunks = list(endpoint.client().chat.completions.create(
        model=endpoint.model, messages=MESSAGES, max_tokens=MAX_TOKENS, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finished = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finished[-1] in ("length", "stop") and not any(finished[:-1])
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and not chunks[-1].choices
    assert 0 < with_usage[0].usage.completion_tokens <= MAX_TOKENS  # type: ignore[union-attr]


def a_completion_is_answered_whole_and_streamed(endpoint: Endpoint) -> None:
    client = endpoint.client()
    whole = client.completions.create(model=endpoint.model, prompt="Once upon a time",
                                      max_tokens=MAX_TOKENS)  # fmt: skip
    assert whole.choices[0].text and whole.usage is not None
    streamed = list(client.completions.create(model=endpoint.model, prompt="Once upon a time",
                                              max_tokens=MAX_TOKENS, stream=True))  # fmt: skip
    assert "".join(c.choices[0].text for c in streamed if c.choices)


def n_choices_carry_their_log_probabilities(endpoint: Endpoint) -> None:
    answer = endpoint.client().chat.completions.create(
        model=endpoint.model, messages=MESSAGES, max_tokens=4, n=2, logprobs=True,
        top_logprobs=2,
    )  # fmt: skip
    assert sorted(choice.index for choice in answer.choices) == [0, 1]
    for choice in answer.choices:
        content = choice.logprobs.content if choice.logprobs else None
        assert content and "".join(entry.token for entry in content) == choice.message.content
        assert all(len(entry.top_logprobs) == 2 for entry in content)


def errors_are_openais_typed_errors(endpoint: Endpoint) -> None:
    with pytest.raises(openai.AuthenticationError) as unknown_key:
        endpoint.client(key="sk-not-a-key").chat.completions.create(
            model=endpoint.model, messages=MESSAGES, max_tokens=MAX_TOKENS
        )
    assert unknown_key.value.status_code == 401 and unknown_key.value.code == "invalid_api_key"
    client = endpoint.client()
    with pytest.raises(openai.NotFoundError) as unknown_model:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=4)
    assert unknown_model.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=endpoint.model, messages=MESSAGES, max_tokens=-1)


def the_request_id_comes_back(endpoint: Endpoint) -> None:
    sent = f"conformance-{uuid.uuid4().hex[:12]}"
    raw = endpoint.client().chat.completions.with_raw_response.create(
        model=endpoint.model, messages=MESSAGES, max_tokens=MAX_TOKENS,
        extra_headers={"X-Request-Id": sent},
    )  # fmt: skip
    assert raw.headers.get("x-request-id") == sent
    assert raw.parse().choices[0].message.content


CHECKS: dict[str, Callable[[Endpoint], None]] = {
    "models": models_are_listed_and_retrieved,
    "chat": a_chat_is_answered_with_its_usage,
    "chat-stream": a_streamed_chat_ends_with_its_usage,
    "completions": a_completion_is_answered_whole_and_streamed,
    "n-logprobs": n_choices_carry_their_log_probabilities,
    "errors": errors_are_openais_typed_errors,
    "request-id": the_request_id_comes_back,
}
