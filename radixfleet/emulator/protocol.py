"""SGLang 0.5.23's request bodies, parsed into Jobs; the answers' bodies are in `answers.py`.

Pure functions, no I/O: the server reads JSON, calls `parse_*`, expands the job into the
request's `n` samples (`samples`), runs them through the model, and formats the answer with
`answers.py`. Bad input raises :class:`ApiError` carrying SGLang's status and error body
`{"error": {"message", "type", "code", "retryable"}}`. Unknown fields are accepted (the router
adds some of its own).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import time
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.profile import MAX_CONTEXT_TOKENS

#: Defaults of SGLang's request types.
GENERATE_MAX_NEW_TOKENS = 128
COMPLETION_MAX_TOKENS = 16
#: Longest LoRA adapter name or cache salt a request may give.
MAX_NAMESPACE_CHARS = 256
#: Most samples a request may ask for (`n`) and most alternatives per token (`top_logprobs`):
#: OpenAI's bounds, which the clients SGLang serves are written against.
MAX_SAMPLES = 128
MAX_TOP_LOGPROBS = 20
#: Bounds of the "natural" answer length when a request does not force one (EOS not ignored).
NATURAL_MIN, NATURAL_SPAN = 16, 240

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "UnauthorizedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "RequestEntityTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """An error answered to the client with SGLang's body; never a traceback."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict[str, Any]:
        """SGLang's error body for this error."""
        return {
            "error": {
                "message": self.message,
                "type": _ERROR_TYPES.get(self.status, "InternalServerError"),
                "code": self.status,
                "retryable": self.status in (408, 429) or self.status >= 500,
            }
        }


@dataclass(frozen=True, slots=True)
class CacheNamespace:
    """What a request's cache entries are keyed by besides its tokens.

    SGLang keeps the prefixes of each LoRA adapter and each cache salt apart: a request reuses
    only KV computed under the same adapter and salt (the same tokens under another adapter are
    other activations; a salt keeps one tenant's prompts from revealing another's by timing).
    """

    lora: str | None = None
    salt: str | None = None


@dataclass(frozen=True, slots=True)
class NamespacedPage:
    """A cache page of a request with a namespace: equal only to the same tokens in the same
    namespace, so the radix tree gives each namespace a subtree of its own."""

    namespace: CacheNamespace
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Stops:
    """When an answer may end before `max_new_tokens`, as SGLang's sampling params say."""

    strings: tuple[str, ...] = ()
    token_ids: frozenset[int] = frozenset()
    min_new_tokens: int = 0
    ignore_eos: bool = False


@dataclass(slots=True)
class Job:
    """One generation as the server runs it: the prompt in tokens and the answer to give."""

    kind: str  # "generate", "completion" or "chat"
    model: str
    prompt_ids: list[int]
    max_new_tokens: int
    answer_ids: list[int] = field(default_factory=list)
    stopped: bool = False  # ends on EOS or a stop rather than on max_new_tokens
    # What ended it early: EOS or a stop token id (generated after the answer, neither in its
    # text nor counted), or a stop string (its tokens, `stop_ids`, generated and counted, not
    # in the text: SGLang trims the stop string).
    matched_stop: int | str | None = None
    stop_ids: list[int] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))
    namespace: CacheNamespace | None = None  # None: the base model, no salt
    stops: Stops = field(default_factory=Stops)
    samples: int = 1  # the request's `n`: how many answers it asked for
    index: int = 0  # which of them this job is
    top_logprobs: int | None = None  # alternatives to report per token; None: no logprobs
    parent: str | None = None  # the request's id, for the samples after its first

    @property
    def request_id(self) -> str:
        """The id the answer carries: the request's, shared by its samples."""
        return self.parent or self.rid

    @property
    def completion_tokens(self) -> int:
        """Tokens generated and counted: the answer and a stop string's tokens."""
        return len(self.answer_ids) + len(self.stop_ids)

    def generated_ids(self) -> list[int]:
        """Every token the model generates for the job, the ending token included."""
        ending = self.matched_stop if isinstance(self.matched_stop, int) else None
        ended = [ending] if self.stopped and ending is not None else []
        return self.answer_ids + self.stop_ids + ended


# -- parsing -----------------------------------------------------------------------------------


def _field(body: dict[str, Any], name: str, kinds: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ApiError(400, f"Field '{name}' has the wrong type: {type(value).__name__}.")
    if not isinstance(value, kinds):
        raise ApiError(400, f"Field '{name}' has the wrong type: {type(value).__name__}.")
    return value


# Sampling fields SGLang's request models type as numbers; the emulator does not sample, but a
# request SGLang would refuse must be refused here too.
NUMERIC_SAMPLING = ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
                    "repetition_penalty")  # fmt: skip


def _check_sampling(params: dict[str, Any]) -> None:
    for name in NUMERIC_SAMPLING:
        value = params.get(name)
        if value is not None and not _finite_number(value):
            raise ApiError(400, f"Field '{name}' must be a number, got {value!r}.")
    top_k = params.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
        raise ApiError(400, f"Field 'top_k' must be an integer, got {top_k!r}.")


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _max_tokens(value: Any, *, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ApiError(400, f"{name} must be a non-negative integer, got {value!r}.")
    return value


def parse_stops(params: dict[str, Any], *, min_field: str) -> Stops:
    """`stop`, `stop_token_ids`, `ignore_eos` and the minimum (`min_new_tokens` in /generate's
    sampling params, `min_tokens` in the OpenAI routes) of a request or its sampling params."""
    stop = params.get("stop")
    strings = (stop,) if isinstance(stop, str) else stop
    if strings is None:
        strings = ()
    if not isinstance(strings, list | tuple) or not all(isinstance(t, str) and t for t in strings):
        raise ApiError(400, "Field 'stop' must be a non-empty string or a list of them.")
    token_ids = params.get("stop_token_ids") or []
    if not isinstance(token_ids, list) or not all(_is_token(t) for t in token_ids):
        raise ApiError(400, "Field 'stop_token_ids' must be a list of token ids.")
    minimum = _max_tokens(params.get(min_field) or 0, name=min_field)
    ignore_eos = bool(params.get("ignore_eos", False))
    return Stops(tuple(strings), frozenset(token_ids), minimum, ignore_eos)


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = bool(_field(body, "stream", bool, False))
    options = _field(body, "stream_options", dict, {})
    return stream, bool(options.get("include_usage", False))


def _prompt_ids(prompt: Any, tokenizer: EmulatorTokenizer, *, name: str) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return tokenizer.encode(prompt[0])
    if isinstance(prompt, list) and prompt and all(_is_token(item) for item in prompt):
        return list(prompt)
    raise ApiError(400, f"'{name}' must be a string or a list of token ids.")


def _is_token(item: Any) -> bool:
    return isinstance(item, int) and not isinstance(item, bool) and item >= 0


def parse_generate(body: dict[str, Any], tokenizer: EmulatorTokenizer) -> Job:
    """SGLang's native /generate: `text` or `input_ids`, and `sampling_params`."""
    params = _field(body, "sampling_params", dict, {})
    _check_sampling(params)
    if body.get("text") is not None:
        prompt_ids = _prompt_ids(body["text"], tokenizer, name="text")
    elif body.get("input_ids") is not None:
        prompt_ids = _prompt_ids(body["input_ids"], tokenizer, name="input_ids")
    else:
        raise ApiError(400, "Either text or input_ids should be provided.")
    requested = params.get("max_new_tokens")
    max_new = _max_tokens(
        GENERATE_MAX_NEW_TOKENS if requested is None else requested, name="max_new_tokens"
    )
    stream, _ = _stream_flags(body)
    job = Job(kind="generate", model="", prompt_ids=prompt_ids, max_new_tokens=max_new)
    job.stream = stream
    job.namespace = parse_namespace(body)
    if isinstance(body.get("rid"), str):
        job.rid = body["rid"]
    job.samples = _samples(params)
    if _field(body, "return_logprob", bool, False):
        job.top_logprobs = _top_logprobs(body.get("top_logprobs_num"), name="top_logprobs_num")
    _decide_answer(job, tokenizer, parse_stops(params, min_field="min_new_tokens"))
    return job


def parse_completion(
    body: dict[str, Any], tokenizer: EmulatorTokenizer, *, model: str, adapter: str | None = None
) -> Job:
    """OpenAI /v1/completions; `adapter` is the LoRA adapter the model name chose."""
    _check_sampling(body)
    if body.get("prompt") is None:
        raise ApiError(400, "Field 'prompt' is required.")
    prompt_ids = _prompt_ids(body["prompt"], tokenizer, name="prompt")
    max_new = _max_tokens(_field(body, "max_tokens", int, COMPLETION_MAX_TOKENS), name="max_tokens")
    job = Job(kind="completion", model=model, prompt_ids=prompt_ids, max_new_tokens=max_new)
    job.stream, job.include_usage = _stream_flags(body)
    job.namespace = parse_namespace(body, adapter=adapter)
    job.samples = _samples(body)
    if body.get("logprobs") is not None:  # here the number of alternatives, as in OpenAI's API
        job.top_logprobs = _top_logprobs(body["logprobs"], name="logprobs")
    _decide_answer(job, tokenizer, parse_stops(body, min_field="min_tokens"))
    return job


def parse_chat(
    body: dict[str, Any],
    tokenizer: EmulatorTokenizer,
    *,
    model: str,
    context_length: int,
    adapter: str | None = None,
) -> Job:
    """OpenAI /v1/chat/completions; without max_tokens the answer may use the whole context."""
    _check_sampling(body)
    messages = _field(body, "messages", list, None)
    if not messages:
        raise ApiError(400, "Field 'messages' is required and must be a non-empty list.")
    prompt_ids = tokenizer.encode(tokenizer.chat_prompt([_message(item) for item in messages]))
    default = max(context_length - len(prompt_ids), 0)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    max_new = default if limit is None else _max_tokens(limit, name="max_tokens")
    job = Job(kind="chat", model=model, prompt_ids=prompt_ids, max_new_tokens=max_new)
    job.stream, job.include_usage = _stream_flags(body)
    job.namespace = parse_namespace(body, adapter=adapter)
    job.samples = _samples(body)
    job.top_logprobs = _chat_logprobs(body)
    _decide_answer(job, tokenizer, parse_stops(body, min_field="min_tokens"))
    return job


def _samples(params: dict[str, Any]) -> int:
    n = params.get("n")
    if n is None:
        return 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SAMPLES:
        raise ApiError(400, f"Field 'n' must be an integer from 1 to {MAX_SAMPLES}, got {n!r}.")
    return n


def _top_logprobs(value: Any, *, name: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOP_LOGPROBS:
        message = f"Field '{name}' must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {value!r}."
        raise ApiError(400, message)
    return value


def _chat_logprobs(body: dict[str, Any]) -> int | None:
    """Chat's `logprobs` switch and `top_logprobs` count; a count without the switch is refused,
    as OpenAI refuses it."""
    wanted = _field(body, "logprobs", bool, False)
    top = body.get("top_logprobs")
    if not wanted:
        if top:
            raise ApiError(400, "Field 'top_logprobs' needs 'logprobs' set to true.")
        return None
    return _top_logprobs(top, name="top_logprobs")


def samples(job: Job, tokenizer: EmulatorTokenizer) -> list[Job]:
    """The request's `n` generations: the parsed job, then copies answered afresh (the index is
    part of their seed, as sampling would make them differ), each with its own request id."""
    copies = [job]
    for index in range(1, job.samples):
        copy = dataclasses.replace(
            job, index=index, rid=f"{job.rid}-{index}", parent=job.rid, answer_ids=[],
            stop_ids=[], stopped=False, matched_stop=None,
        )  # fmt: skip
        _decide_answer(copy, tokenizer, job.stops)
        copies.append(copy)
    return copies


def parse_namespace(body: dict[str, Any], *, adapter: str | None = None) -> CacheNamespace | None:
    """The request's cache namespace: its LoRA adapter (`lora_path`, as SGLang names the
    field, or the `base:adapter` model name) and its `cache_salt`; None when it has neither."""
    lora = _namespace_field(body, "lora_path") or adapter
    salt = _namespace_field(body, "cache_salt")
    if lora is None and salt is None:
        return None
    return CacheNamespace(lora=lora, salt=salt)


def _namespace_field(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"Field '{name}' must be a string, got {type(value).__name__}.")
    if len(value) > MAX_NAMESPACE_CHARS:
        raise ApiError(400, f"Field '{name}' is longer than {MAX_NAMESPACE_CHARS} characters.")
    return value


def _message(item: Any) -> tuple[str, str]:
    if not isinstance(item, dict) or not isinstance(item.get("role"), str):
        raise ApiError(400, "Each message must be an object with a string 'role'.")
    content = item.get("content")
    if content is None or isinstance(content, str):
        return item["role"], content or ""
    if isinstance(content, list):
        texts = [part.get("text", "") for part in content if isinstance(part, dict)]
        if all(isinstance(text, str) for text in texts):
            return item["role"], "".join(texts)
    raise ApiError(400, "Message 'content' must be a string or a list of text parts.")


# No profile's context is longer: a request that asks for more is refused by the replica's
# context check before its answer is used, so building more (10**9 ids took 25 s and ended in
# MemoryError) is never needed.
ANSWER_CAP = MAX_CONTEXT_TOKENS


def _decide_answer(job: Job, tokenizer: EmulatorTokenizer, stops: Stops) -> None:
    """Pick the answer: deterministic in the prompt, ending on EOS unless told otherwise, or
    earlier on a stop token or string, never before `min_new_tokens` (SGLang checks no finish
    condition until then)."""
    key = (len(job.prompt_ids), tuple(job.prompt_ids[-32:]))
    seed = hash(key if job.index == 0 else (*key, job.index)) & 0xFFFFFFFF
    natural = max(NATURAL_MIN + seed % NATURAL_SPAN, stops.min_new_tokens)
    ceiling = min(job.max_new_tokens, ANSWER_CAP)
    length = min(ceiling if stops.ignore_eos else natural, ceiling)
    ids = tokenizer.answer(seed=seed, length=length)
    job.stops = stops
    job.stopped = length < job.max_new_tokens
    job.matched_stop = tokenizer.eos_token_id if job.stopped else None
    job.answer_ids = ids
    at_token = _first_stop_token(ids, stops)
    at_string = _first_stop_string(ids, tokenizer, stops)
    if at_string is not None and (at_token is None or at_string[1] < at_token):
        start, end, matched = at_string
        job.answer_ids, job.stop_ids = ids[:start], ids[start : end + 1]
        job.stopped, job.matched_stop = True, matched
    elif at_token is not None:
        job.answer_ids, job.stopped, job.matched_stop = ids[:at_token], True, ids[at_token]


def _first_stop_token(ids: Sequence[int], stops: Stops) -> int | None:
    """The index of the first stop token at or past the minimum."""
    if not stops.token_ids:
        return None
    first = max(stops.min_new_tokens - 1, 0)
    return next((i for i in range(first, len(ids)) if ids[i] in stops.token_ids), None)


def _first_stop_string(
    ids: Sequence[int], tokenizer: EmulatorTokenizer, stops: Stops
) -> tuple[int, int, str] | None:
    """(first token the stop string touches, the token that completes it, the string) for the
    earliest stop string completed at or past the minimum."""
    if not stops.strings:
        return None
    ends = list(itertools.accumulate(len(tokenizer.decode([i])) for i in ids))
    text = tokenizer.decode(ids)
    found: list[tuple[int, int, str]] = []
    for string in stops.strings:
        at = text.find(string)
        while at >= 0:
            end = bisect.bisect_left(ends, at + len(string))  # the token completing it
            if end + 1 >= stops.min_new_tokens:
                found.append((bisect.bisect_right(ends, at), end, string))
                break
            at = text.find(string, at + 1)
    return min(found, key=lambda f: f[1], default=None)


# -- the cache ---------------------------------------------------------------------------------


def block_keys(
    ids: Sequence[int], block_tokens: int, namespace: CacheNamespace | None = None
) -> tuple[Hashable, ...]:
    """The cache block keys of `ids`: every full block of `block_tokens` ids, as a tuple of
    ids, or a `NamespacedPage` of one when the request has a namespace."""
    end = len(ids) - len(ids) % block_tokens
    pages = tuple(tuple(ids[start : start + block_tokens]) for start in range(0, end, block_tokens))
    if namespace is None:
        return pages
    return tuple(NamespacedPage(namespace, page) for page in pages)
