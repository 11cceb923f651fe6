"""Requests as the replica model sees them: what is asked, how far it got, and why it failed.

A :class:`RequestSpec` is the caller's description (token counts and cache block keys; no text);
a :class:`Request` is the model's record of it, read by the emulator to answer the client and by
the twin to score latencies. :class:`RejectedError` is raised at submission with the HTTP status
SGLang would answer.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, field


class Phase(enum.Enum):
    """Where a request is in the replica."""

    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"
    ABORTED = "aborted"


class RejectReason(enum.Enum):
    """Why a submission was refused; each maps to SGLang's status code."""

    NOT_READY = "not_ready"
    QUEUE_FULL = "queue_full"
    TOO_LONG = "too_long"
    INJECTED_ERROR = "injected_error"

    @property
    def status(self) -> int:
        """The HTTP status SGLang answers for this reason."""
        return _STATUS[self]


_STATUS = {
    RejectReason.NOT_READY: 503,
    RejectReason.QUEUE_FULL: 503,
    RejectReason.TOO_LONG: 400,
    RejectReason.INJECTED_ERROR: 500,
}


class RejectedError(Exception):
    """A submission the replica refused; `reason` carries the status, `message` SGLang's text."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One generation request in tokens.

    `prompt_blocks` are the keys of the prompt's full cache blocks; `finish_blocks`, if given,
    the keys of prompt plus output, cached when the request finishes (so a later turn that
    repeats the answer hits it). `output_tokens` is how many tokens the request will produce:
    the caller decides, from its max_new_tokens and a natural stop. `transferred_tokens` are
    prompt tokens whose KV a prefill peer sent (a P/D decode replica): they take GPU room but
    no prefill pass, as SGLang's decode role builds its batch from the KV it received.
    """

    rid: str
    prompt_tokens: int
    output_tokens: int
    max_new_tokens: int
    prompt_blocks: tuple[Hashable, ...] = ()
    finish_blocks: tuple[Hashable, ...] | None = None
    transferred_tokens: int = 0


@dataclass(slots=True, eq=False)
class Request:
    """The model's record of one request; times are in the model's clock.

    `generated` and `decode_steps` are final once the request is done; while it runs, ask the
    model (`ReplicaModel.generated_tokens`), which counts decode steps lazily.
    """

    spec: RequestSpec
    arrival: float
    phase: Phase = Phase.WAITING
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    cached_tokens: int = 0  # every tier's: the GPU's, then the host's and storage's below
    host_cached_tokens: int = 0
    storage_cached_tokens: int = 0
    prefilled_tokens: int = 0
    decode_steps: int = 0
    generated: int = 0
    finish_reason: str | None = None
    # Bookkeeping the model keeps for the cache; not for callers.
    node: object = field(default=None, repr=False)
    private_tokens: int = field(default=0, repr=False)
    need_tokens: int = field(default=0, repr=False)
    allocated_tokens: int = field(default=0, repr=False)
    load_tokens: int = field(default=0, repr=False)  # from the host or storage, not yet on GPU
    join_step: int = field(default=0, repr=False)

    @property
    def rid(self) -> str:
        """The request id."""
        return self.spec.rid

    @property
    def done(self) -> bool:
        """True once finished or aborted."""
        return self.phase in (Phase.FINISHED, Phase.ABORTED)

    @property
    def ttft(self) -> float | None:
        """Time to first token, from arrival."""
        return None if self.first_token_at is None else self.first_token_at - self.arrival

    @property
    def e2e_latency(self) -> float | None:
        """Arrival to finish."""
        return None if self.finished_at is None else self.finished_at - self.arrival

    @property
    def queue_time(self) -> float | None:
        """Arrival to admission into a batch."""
        return None if self.admitted_at is None else self.admitted_at - self.arrival

    @property
    def mean_itl(self) -> float | None:
        """Mean inter-token latency after the first token; None below two tokens."""
        if self.finished_at is None or self.first_token_at is None or self.spec.output_tokens < 2:
            return None
        return (self.finished_at - self.first_token_at) / (self.spec.output_tokens - 1)


class EventKind(enum.Enum):
    """What happened to a request at a model time."""

    FIRST_TOKEN = "first_token"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class Event:
    """A change a caller may wait for."""

    kind: EventKind
    request: Request
    time: float
