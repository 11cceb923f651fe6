"""Token-rate budgets as token buckets: per tenant, and per tenant and model. Pure: time is `now`.

A bucket holds up to `burst_seconds` of the budget and refills at `tokens_per_minute / 60` per
second. Charging is done in three moves, so that a budget holds while streams are in flight
(Envoy AI Gateway charges only once a response completes, and admitted streams overshoot):

1. `admit`: the prompt is charged up front. A request is admitted only while every bucket it
   draws on holds at least its prompt (or the whole capacity, for a prompt larger than that);
   otherwise it is throttled with the seconds until the refill covers it (Retry-After).
2. `charge`: completion tokens are charged as they stream. A stream in flight is never cut off:
   its tokens may take a bucket below zero, and that debt holds back the tenant's next requests.
3. `settle`: at the end the exact usage replaces the estimates (the prompt was counted before
   tokenizing; a stream may not say how many tokens each chunk carried).

So every admission happens with no more than `capacity + rate x elapsed` tokens charged before
it, in-flight completions included. Tenants without a token budget are metered, never throttled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from radixfleet.config.catalog import TokenBudget

DEFAULT_BURST_SECONDS = 5.0
EPSILON_TOKENS = 1e-6


@dataclass(frozen=True)
class Bucket:
    """One budget's balance at time `at`; `level` below zero is debt from streamed tokens."""

    capacity: float
    rate: float  # tokens per second
    level: float
    at: float

    @classmethod
    def full(cls, per_minute: int, *, burst_seconds: float, now: float) -> Bucket:
        rate = per_minute / 60.0
        return cls(capacity=rate * burst_seconds, rate=rate, level=rate * burst_seconds, at=now)

    def at_time(self, now: float) -> Bucket:
        """Refilled up to `now` (a clock that steps back refills nothing)."""
        elapsed = max(0.0, now - self.at)
        level = min(self.capacity, self.level + self.rate * elapsed)
        return Bucket(self.capacity, self.rate, level, max(now, self.at))

    def charged(self, tokens: float) -> Bucket:
        """Less `tokens`; a refund (negative) never fills past capacity."""
        return Bucket(self.capacity, self.rate, min(self.capacity, self.level - tokens), self.at)

    def need(self, prompt: int) -> float:
        return min(float(prompt), self.capacity)

    def wait(self, prompt: int) -> float:
        """Seconds until this bucket admits `prompt` (0: now)."""
        short = self.need(prompt) - self.level
        # Refills add up in floating point; a millionth of a token short is not short.
        return 0.0 if short <= EPSILON_TOKENS else short / self.rate


BucketKey = tuple[str, str | None]  # (tenant, None) overall, (tenant, model) per model


@dataclass
class Ticket:
    """One admitted request: what it was charged so far, to settle at the end."""

    tenant: str
    model: str
    buckets: tuple[BucketKey, ...]
    prompt: int
    completion: int = 0  # tokens generated so far (streamed)
    reserved: int = 0  # completion tokens charged on admission, ahead of their generation
    settled: bool = False

    @property
    def charged_completion(self) -> int:
        """Completion tokens the buckets hold for this ticket: the reservation until the
        stream passes it, then what it generated."""
        return max(self.completion, self.reserved)


@dataclass(frozen=True)
class Throttled:
    """Refused: the budget that ran out and the whole seconds until it covers the prompt."""

    tenant: str
    retry_after: int
    budget: str


@dataclass
class TokenLedger:
    """Every tenant's buckets. `budgets` maps tenant to its budget (None: unlimited)."""

    budgets: Mapping[str, TokenBudget | None]
    burst_seconds: float = DEFAULT_BURST_SECONDS
    buckets: dict[BucketKey, Bucket] = field(default_factory=dict)

    def admit(
        self, tenant: str, model: str, prompt: int, *, now: float, reserve: int = 0
    ) -> Ticket | Throttled:
        """Charge `prompt` and `reserve` completion tokens (what the request may generate) and
        return a ticket, or say how long to wait."""
        keys = self._keys(tenant, model)
        current = {key: self._bucket(key, now) for key in keys}
        waits = {key: bucket.wait(prompt + reserve) for key, bucket in current.items()}
        blocking = max(waits, key=lambda k: waits[k], default=None)
        if blocking is not None and waits[blocking] > 0:
            self.buckets.update(current)
            seconds = max(1, math.ceil(waits[blocking]))
            return Throttled(tenant, seconds, _describe(blocking))
        for key, bucket in current.items():
            self.buckets[key] = bucket.charged(prompt + reserve)
        return Ticket(tenant=tenant, model=model, buckets=keys, prompt=prompt, reserved=reserve)

    def owing(self, tenant: str, *, now: float) -> Throttled | None:
        """Throttled when the tenant's overall budget would admit no request at all (empty, or
        in debt from streamed tokens): the entry refuses it before reading its body."""
        if self.budgets.get(tenant) is None:
            return None
        key: BucketKey = (tenant, None)
        wait = self._bucket(key, now).wait(1)
        return None if wait <= 0 else Throttled(tenant, max(1, math.ceil(wait)), _describe(key))

    def charge(self, ticket: Ticket, completion: int, *, now: float) -> None:
        """Count `completion` more streamed tokens; the buckets pay only for those past the
        ticket's reservation."""
        before = ticket.charged_completion
        ticket.completion += completion
        self._apply(ticket, ticket.charged_completion - before, now=now)

    def settle(
        self, ticket: Ticket, *, prompt: int | None, completion: int | None, now: float
    ) -> tuple[int, int]:
        """Replace the estimates with the exact usage (None: keep the estimate) and give back
        what was reserved and not generated; returns the corrections (prompt, completion) to
        the tokens counted so far, negative for a refund."""
        if ticket.settled:
            return 0, 0
        dp = 0 if prompt is None else prompt - ticket.prompt
        generated = ticket.completion if completion is None else completion
        dc = generated - ticket.completion
        self._apply(ticket, dp + generated - ticket.charged_completion, now=now)
        ticket.prompt += dp
        ticket.completion, ticket.reserved = generated, 0
        ticket.settled = True
        return dp, dc

    def set_budgets(self, budgets: Mapping[str, TokenBudget | None], *, now: float) -> None:
        """Take new budgets (a Tenant changed, or the entry's replica count). A bucket whose
        budget changed takes the new rate and capacity but keeps its balance as of `now`, debt
        included (capped at the new capacity): a budget change forgives nothing, and a raise
        grants no fresh burst. A bucket whose budget went away goes with it."""
        old, new = self.budgets, dict(budgets)
        if new == dict(old):  # the usual sync: nothing to redo
            return
        self.budgets = new
        # Bucket by bucket, in place: the entry reloads from another thread than the one that
        # charges, and a whole new dict would lose a charge made while it was being built.
        for key, bucket in list(self.buckets.items()):
            rate = _rate(new, key)
            if rate is None:
                self.buckets.pop(key, None)
            elif rate != _rate(old, key):
                fresh = Bucket.full(rate, burst_seconds=self.burst_seconds, now=now)
                level = min(fresh.capacity, bucket.at_time(now).level)
                self.buckets[key] = Bucket(fresh.capacity, fresh.rate, level, fresh.at)

    def rate(self, key: BucketKey) -> int | None:
        """The bucket's budget in tokens per minute (None: no such budget)."""
        return _rate(self.budgets, key)

    def owe(self, key: BucketKey, tokens: float, *, now: float) -> None:
        """Charge a bucket `tokens` it owes from elsewhere (another replica's ledger,
        radixfleet/controllers/quota/carry.py); nothing for a budget that does not exist."""
        if self.rate(key) is not None:
            self.buckets[key] = self._bucket(key, now).charged(tokens)

    def balance(self, tenant: str, model: str | None = None, *, now: float) -> float | None:
        """The bucket's level now (None: no such budget); for status and tests."""
        key = (tenant, model)
        return self._bucket(key, now).level if key in self._keys(tenant, model or "") else None

    def _apply(self, ticket: Ticket, tokens: int, *, now: float) -> None:
        for key in ticket.buckets:
            self.buckets[key] = self._bucket(key, now).charged(tokens)

    def _keys(self, tenant: str, model: str) -> tuple[BucketKey, ...]:
        budget = self.budgets.get(tenant)
        if budget is None:
            return ()
        per_model = ((tenant, model),) if model in budget.per_model else ()
        return ((tenant, None), *per_model)

    def _bucket(self, key: BucketKey, now: float) -> Bucket:
        found = self.buckets.get(key)
        if found is not None:
            return found.at_time(now)
        budget = self.budgets[key[0]]
        assert budget is not None
        per_minute = budget.tokens_per_minute if key[1] is None else budget.per_model[key[1]]
        return Bucket.full(per_minute, burst_seconds=self.burst_seconds, now=now)


def _rate(budgets: Mapping[str, TokenBudget | None], key: BucketKey) -> int | None:
    budget = budgets.get(key[0])
    if budget is None:
        return None
    return budget.tokens_per_minute if key[1] is None else budget.per_model.get(key[1])


def _describe(key: BucketKey) -> str:
    tenant, model = key
    return f"tenant {tenant}" if model is None else f"tenant {tenant}, model {model}"
