"""Debts outlive an entry replica (radixfleet/controllers/quota/carry.py): what one replica was owed
is taken on by the next, exactly, once; and the cluster gate keeps its entry as it serves, and says
its last word when it stops. The ConfigMap itself, on a real API server:
tests/quota/test_kube.py."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota import carry
from radixfleet.controllers.quota.carry import Owed, Stored
from radixfleet.controllers.quota.entry import ClusterGate
from radixfleet.controllers.quota.fakes import FakeLedgerStore, FakeSecrets, FakeTenants
from radixfleet.controllers.quota.ledger import Ticket, TokenLedger
from radixfleet.kit.errors import KubeError

PER_MINUTE = 6000  # 100 tokens a second; a 10 s burst holds 1,000
T0 = 1_800_000_000.0  # the wall clock's seconds


def ledger() -> TokenLedger:
    budget = TokenBudget(tokens_per_minute=PER_MINUTE, per_model={"m": PER_MINUTE // 2})
    return TokenLedger({"a": budget, "b": budget}, burst_seconds=10.0)


def in_debt(book: TokenLedger, tenant: str, tokens: int, *, now: float = 0.0) -> bool:
    """Admit a short prompt and stream `tokens` past it, as a long answer does; False when the
    prompt was throttled (the tenant owes already)."""
    ticket = book.admit(tenant, "m", 1, now=now)
    if not isinstance(ticket, Ticket):
        return False
    book.charge(ticket, tokens, now=now)
    return True


@given(
    streamed=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 5000)), max_size=6),
    elapsed=st.floats(0, 120),
)
def test_taking_on_a_replicas_debts_leaves_the_balances_it_would_have_had(
    streamed: list[tuple[str, int]], elapsed: float
) -> None:
    """A fresh replica that takes on what a gone one was owed holds every bucket where the gone
    one would hold it now, had it lived: nothing forgiven, nothing charged twice."""
    gone = ledger()
    for tenant, tokens in streamed:
        in_debt(gone, tenant, tokens)
    written = Owed.from_wire(carry.owed(gone, now=0.0, wall=T0).to_wire())
    assert written is not None
    fresh = ledger()
    carry.take_on(fresh, written, now=50.0, wall=T0 + elapsed)
    for key in [("a", None), ("a", "m"), ("b", None), ("b", "m")]:
        lived = gone.balance(key[0], key[1], now=elapsed)
        assert fresh.balance(key[0], key[1], now=50.0) == pytest.approx(lived, abs=0.01), key


def test_a_tenant_without_a_budget_now_owes_nothing_here() -> None:
    gone = ledger()
    assert in_debt(gone, "a", 3000)
    fresh = TokenLedger({"a": None, "b": TokenBudget(tokens_per_minute=PER_MINUTE)})
    carry.take_on(fresh, carry.owed(gone, now=0.0, wall=T0), now=0.0, wall=T0)
    assert fresh.buckets == {}


def _stored(**entries: Owed) -> Stored:
    return Stored("7", {replica: entry.to_wire() for replica, entry in entries.items()})


DEBT = Owed(at=T0, tokens={("a", None): 500.0})


@pytest.mark.parametrize(
    ("entries", "first", "claimed"),
    [
        ({"other": DEBT}, False, ()),
        ({"other": Owed(T0 - carry.STALE_AFTER_S, DEBT.tokens)}, False, ("other",)),
        ({"other": Owed(T0, DEBT.tokens, final=True)}, False, ("other",)),
        ({"me": Owed(T0 - 1e6, DEBT.tokens)}, False, ()),
        ({"me": DEBT}, True, ("me",)),
        ({"me": DEBT, "gone": Owed(T0, DEBT.tokens, final=True), "live": DEBT}, True,
         ("gone", "me")),
    ],
    ids=["a-live-replicas-entry-is-left-alone", "a-silent-replicas-is-an-orphan",
         "one-that-said-goodbye-is-an-orphan-at-once", "its-own-is-never-an-orphan-later",
         "its-own-from-a-previous-life-is-taken-on-the-first-pass", "both-at-once"],
)  # fmt: skip
def test_what_a_replica_claims(entries: dict[str, Owed], first: bool, claimed: tuple[str]) -> None:
    step = carry.plan(_stored(**entries), own="me", wall=T0, first=first)
    assert step.claim == claimed and step.version == "7"
    assert step.adopted == tuple(entries[r] for r in claimed)


@pytest.mark.parametrize(
    "text", ["", "{", "[]", '{"at": "x", "final": false, "owed": []}', '{"at": 1, "owed": [[1]]}'],
    ids=["empty", "truncated", "not-an-object", "a-time-that-is-not-one", "a-short-bucket"],
)  # fmt: skip
def test_an_unreadable_entry_is_skipped_never_guessed(text: str) -> None:
    assert Owed.from_wire(text) is None
    step = carry.plan(Stored("1", {"gone": text}), own="me", wall=T0 + 1e6, first=True)
    assert step.claim == ()


# ---- the cluster gate keeps its entry ---------------------------------------------------------


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def gate(store: FakeLedgerStore, replica: str, wall: Wall) -> ClusterGate:
    tenants = FakeTenants()
    tenants.add(
        {
            "metadata": {"name": "a"},
            "spec": {"namespaces": ["team-a"], "tokenBudget": {"tokensPerMinute": 6000}},
        }
    )
    made = ClusterGate(tenants, FakeSecrets(), replicas=1, region="test", ledger=store,
                       replica=replica, wall=wall)  # fmt: skip
    made.gate.clock = lambda: wall.now - T0
    return made


def test_a_replica_killed_in_debt_passes_the_debt_to_the_next() -> None:
    store, wall = FakeLedgerStore(), Wall()
    first = gate(store, "entry-1", wall)
    asyncio.run(first._carry())
    assert store.entries == {}, "nothing written before the budgets are known"
    first.sync()
    asyncio.run(first._carry())
    assert store.entries == {}, "nothing owed, nothing written"
    assert in_debt(first.gate.ledger, "a", 6000, now=0.0)  # 100/s, a 500-token burst: 5,501 in debt
    asyncio.run(first._carry())
    assert set(store.entries) == {"entry-1"}
    # entry-1 is killed (no last word). entry-2 starts 40 s later, past the staleness window.
    wall.now = T0 + 40
    second = gate(store, "entry-2", wall)
    second.sync()
    asyncio.run(second._carry())
    assert store.claims == [("entry-1",)]
    # 6,001 short of full at T0, 4,000 refilled since: 1,501 in debt, where entry-1 would be.
    assert second.gate.ledger.balance("a", now=40.0) == pytest.approx(-1501.0)
    assert set(store.entries) == {"entry-2"}


def test_a_replica_that_stops_says_so_and_its_debt_is_taken_on_at_once() -> None:
    store, wall = FakeLedgerStore(), Wall()
    first = gate(store, "entry-1", wall)
    first.sync()
    assert in_debt(first.gate.ledger, "a", 5000, now=0.0)

    async def serve_then_stop() -> None:
        kept = asyncio.create_task(first.keep(interval_s=0.01))
        await asyncio.sleep(0.05)
        kept.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kept

    asyncio.run(serve_then_stop())
    final = Owed.from_wire(store.entries["entry-1"])
    assert final is not None and final.final
    second = gate(store, "entry-2", wall)
    second.sync()
    asyncio.run(second._carry())  # at once: no staleness window to wait out
    assert store.claims == [("entry-1",)]
    assert second.gate.ledger.owing("a", now=0.0) is not None


def test_a_container_restarted_in_its_pod_takes_on_its_previous_lifes_debt() -> None:
    """An OOM kill restarts the container in the same pod, under the same name."""
    store, wall = FakeLedgerStore(), Wall()
    before = gate(store, "entry-1", wall)
    before.sync()
    assert in_debt(before.gate.ledger, "a", 5000, now=0.0)
    asyncio.run(before._carry())
    wall.now += 1
    after = gate(store, "entry-1", wall)
    after.sync()
    asyncio.run(after._carry())
    assert store.claims == [("entry-1",)]
    assert after.gate.ledger.owing("a", now=1.0) is not None


def test_a_claim_that_loses_a_race_takes_on_nothing_and_writes_nothing() -> None:
    store, wall = FakeLedgerStore(), Wall()
    store.entries["gone"] = Owed(T0, {("a", None): 5000.0}, final=True).to_wire()
    late = gate(store, "entry-2", wall)
    late.sync()
    store.claim(str(store.version), ["gone"])  # another replica took it first
    stale = Stored("1", {"gone": Owed(T0, {("a", None): 5000.0}, final=True).to_wire()})
    store.read = lambda: stale  # type: ignore[method-assign]  # the read before the race
    asyncio.run(late._carry())
    assert late.gate.ledger.owing("a", now=0.0) is None and "entry-2" not in store.entries


def test_a_failed_read_is_tried_again_and_the_debt_kept_in_memory() -> None:
    store, wall = FakeLedgerStore(), Wall()
    first = gate(store, "entry-1", wall)
    first.sync()
    assert in_debt(first.gate.ledger, "a", 5000, now=0.0)
    store.next_error = KubeError("get configmap: HTTP 503", status=503)
    asyncio.run(first._carry())
    assert store.entries == {}
    asyncio.run(first._carry())
    assert set(store.entries) == {"entry-1"}
