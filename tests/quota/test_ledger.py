"""The token ledger as properties (no overshoot at admission, honest Retry-After, tenants
isolated) and the stream meter on the three answer formats."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.ledger import Throttled, Ticket, TokenLedger
from radixfleet.controllers.quota.usage import StreamMeter, Usage, prompt_texts, usage_of

PER_MINUTE = 6000  # 100 tokens/s; a 10 s burst holds 1000


def ledger(**per_model: int) -> TokenLedger:
    budget = TokenBudget(tokens_per_minute=PER_MINUTE, per_model=per_model)
    return TokenLedger({"a": budget, "b": budget, "free": None}, burst_seconds=10.0)


# One step of a tenant's traffic: a new request, streamed tokens, or a settlement.
steps = st.lists(
    st.tuples(
        st.floats(0, 3, allow_nan=False),  # seconds since the previous step
        st.sampled_from(["admit", "charge", "settle"]),
        st.integers(0, 1500),  # tokens
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_no_admission_sees_more_than_capacity_plus_refill_charged(trace: list) -> None:
    # The Envoy overshoot (ai-gateway#2394): streams in flight charge as they go, so a new
    # request is admitted only while everything charged so far, streamed completions
    # included, fits the burst plus what refilled since the start.
    book, now, charged, open_tickets = ledger(), 0.0, 0, []
    capacity, rate = 1000.0, 100.0
    for gap, kind, tokens in trace:
        now += gap
        if kind == "admit":
            result = book.admit("a", "m", tokens, now=now)
            if isinstance(result, Ticket):
                assert charged <= capacity + rate * now + 1e-6
                charged += tokens
                open_tickets.append(result)
        elif kind == "charge" and open_tickets:
            book.charge(open_tickets[-1], tokens, now=now)
            charged += tokens
        elif kind == "settle" and open_tickets:
            ticket = open_tickets.pop()
            dp, dc = book.settle(ticket, prompt=tokens, completion=None, now=now)
            charged += dp + dc


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=20), st.floats(0, 30))
def test_retry_after_is_honest(prompts: list[int], start: float) -> None:
    # A throttled request retried after Retry-After, with nothing charged meanwhile, passes.
    book = ledger()
    for prompt in prompts:
        result = book.admit("a", "m", prompt, now=start)
        if isinstance(result, Throttled):
            assert isinstance(book.admit("a", "m", prompt, now=start + result.retry_after), Ticket)
            return


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=30))
def test_one_tenants_spending_never_throttles_another(prompts: list[int]) -> None:
    book = ledger()
    for prompt in prompts:
        ticket = book.admit("a", "m", prompt, now=0.0)
        if isinstance(ticket, Ticket):
            book.charge(ticket, prompt, now=0.0)
    assert isinstance(book.admit("b", "m", 1000, now=0.0), Ticket)


def test_a_model_budget_throttles_that_model_only() -> None:
    book = ledger(m=600)  # 10 tokens/s, a burst of 100
    assert isinstance(book.admit("a", "m", 100, now=0.0), Ticket)
    throttled = book.admit("a", "m", 50, now=0.0)
    assert isinstance(throttled, Throttled) and throttled.retry_after == 5
    assert throttled.budget == "tenant a, model m"
    assert isinstance(book.admit("a", "other", 500, now=0.0), Ticket)


def test_a_stream_past_the_budget_runs_into_debt_and_holds_the_next_request() -> None:
    book = ledger()
    ticket = book.admit("a", "m", 100, now=0.0)
    assert isinstance(ticket, Ticket)
    book.charge(ticket, 1400, now=1.0)  # never cut: the refilled 1000 less 1400 is 400 of debt
    throttled = book.admit("a", "m", 100, now=1.0)
    assert isinstance(throttled, Throttled) and throttled.retry_after == 5  # (100 + 400) / 100


def test_a_prompt_larger_than_the_burst_waits_for_a_full_bucket_only() -> None:
    book = ledger()
    assert isinstance(book.admit("a", "m", 5000, now=0.0), Ticket)
    assert isinstance(book.admit("a", "m", 5000, now=50.0), Ticket)  # 10 s refill to full + 40


def test_settling_refunds_an_overestimate_and_never_twice() -> None:
    book = ledger()
    ticket = book.admit("a", "m", 900, now=0.0)
    assert isinstance(ticket, Ticket)
    assert book.settle(ticket, prompt=100, completion=0, now=0.0) == (-800, 0)
    assert book.settle(ticket, prompt=0, completion=0, now=0.0) == (0, 0)
    assert book.balance("a", now=0.0) == 900.0


def test_tenants_without_a_budget_are_never_throttled() -> None:
    book = ledger()
    assert all(isinstance(book.admit("free", "m", 10**9, now=0.0), Ticket) for _ in range(5))


# ---- reading usage ---------------------------------------------------------------------------


def sse(*chunks: dict) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )


def test_meter_counts_chat_deltas_and_takes_the_final_usage() -> None:
    meter = StreamMeter()
    stream = sse(
        {"choices": [{"delta": {"role": "assistant"}}]},
        *({"choices": [{"delta": {"content": "tok"}}], "usage": None} for _ in range(5)),
        {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 6}},
    )
    added = [meter.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)]  # split anywhere
    assert sum(added) == 6 and meter.usage == Usage(40, 6)


def test_meter_reads_sglang_generate_cumulative_counts() -> None:
    meter = StreamMeter()
    chunks = [
        {"text": "ab"[:i], "meta_info": {"prompt_tokens": 9, "completion_tokens": i}}
        for i in (1, 2, 3)
    ]
    assert meter.feed(sse(*chunks)) == 3 and meter.usage == Usage(9, 3)


def test_prompt_texts_and_usage_of_whole_answers() -> None:
    chat = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "user", "content": "there"},
        ]
    }
    assert prompt_texts(chat) == ["hi", "there"]
    assert prompt_texts({"prompt": ["a", "b"]}) == ["a", "b"]
    assert prompt_texts({"text": "x"}) == ["x"]
    assert usage_of({"usage": {"prompt_tokens": 3, "completion_tokens": 4}}) == Usage(3, 4)
    assert usage_of({"usage": {"prompt_tokens": True}}) == Usage()


def test_a_budget_change_forgives_nothing() -> None:
    """Before, a changed budget started its bucket afresh: full, its debt forgotten."""
    book = ledger()  # 6,000 a minute: 100/s, a 1,000-token burst
    spent = book.admit("a", "m", 1000, now=0.0)
    assert isinstance(spent, Ticket)
    streaming = book.admit("b", "m", 200, now=0.0)
    assert isinstance(streaming, Ticket)
    book.charge(streaming, 1300, now=0.0)  # a stream took b 500 tokens into debt
    doubled = TokenBudget(tokens_per_minute=12_000)  # 200/s, a 2,000-token burst
    book.set_budgets({"a": doubled, "b": doubled, "c": None}, now=1.0)
    assert book.balance("a", now=1.0) == 100.0  # spent stays spent: 1 s refilled at the old rate
    assert book.balance("b", now=1.0) == -400.0  # the debt stays, less 1 s of refill
    assert book.balance("b", now=3.0) == 0.0  # and is repaid at the new rate
    assert book.balance("a", now=100.0) == 2000.0  # the new capacity, once refilled


def test_a_budget_lowered_caps_the_balance_and_one_removed_drops_it() -> None:
    book = ledger()
    for tenant in ("a", "b"):
        assert isinstance(book.admit(tenant, "m", 10, now=0.0), Ticket)
    book.set_budgets({"a": TokenBudget(tokens_per_minute=600), "b": None}, now=0.0)
    assert book.balance("a", now=0.0) == 100.0  # 990 left, capped at the new 100
    assert book.balance("b", now=0.0) is None and ("b", None) not in book.buckets


@given(
    prompt=st.integers(0, 500),
    reserve=st.integers(0, 2000),
    streamed=st.lists(st.integers(1, 300), max_size=8),
    extra=st.integers(0, 300),
    usage_known=st.booleans(),
)
def test_after_settling_a_reservation_the_buckets_hold_exactly_what_was_generated(
    prompt: int, reserve: int, streamed: list[int], extra: int, usage_known: bool
) -> None:
    # charged == generated: the reservation is a loan, repaid whatever the stream did.
    book = ledger()
    full = book.balance("a", now=0.0)
    assert full is not None
    ticket = book.admit("a", "m", prompt, now=0.0, reserve=reserve)
    assert isinstance(ticket, Ticket)
    for tokens in streamed:
        book.charge(ticket, tokens, now=0.0)
    generated = sum(streamed) + extra if usage_known else sum(streamed)
    book.settle(ticket, prompt=prompt, completion=generated if usage_known else None, now=0.0)
    assert book.balance("a", now=0.0) == pytest.approx(full - prompt - generated)


def test_a_reservation_holds_back_the_next_request_until_it_is_settled() -> None:
    book = ledger()  # a 1000-token burst
    first = book.admit("a", "m", 100, now=0.0, reserve=800)
    assert isinstance(first, Ticket)
    assert isinstance(book.admit("a", "m", 100, now=0.0, reserve=800), Throttled)
    book.settle(first, prompt=100, completion=20, now=0.0)  # it generated 20 of its 800
    assert isinstance(book.admit("a", "m", 100, now=0.0, reserve=700), Ticket)
