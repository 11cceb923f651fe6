"""What a replay sends and what it records: plain data, shared by the replayer and the stats."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WorkItem:
    """One request to send: when (seconds from the start), where, and what."""

    at: float
    region: str
    model: str
    prompt: str
    max_tokens: int
    lora_path: str | None = None  # a LoRA adapter of the model, as SGLang's field names it


@dataclass
class RequestResult:
    """What happened to one request; times are seconds from the replay's start."""

    region: str
    model: str
    scheduled: float
    started: float = 0.0
    first_token: float | None = None
    ended: float = 0.0
    status: int = 0  # HTTP status; 0 when no answer came
    error: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    itl: list[float] = field(default_factory=list)
    attempts: int = 1  # sends, counting the client's retries of 5xx answers
    unanswered: bool = False  # the last send's connection failed before any answer

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        """Time to first token, from when the request was sent."""
        return None if self.first_token is None else self.first_token - self.started
