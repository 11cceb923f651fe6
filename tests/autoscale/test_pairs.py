"""Tests of the prefill/decode pair's scaling rule (radixfleet/controllers/autoscale/pairs.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.controllers.autoscale.pairs import PairCounts, pair_counts

counts = st.integers(min_value=0, max_value=64)


@given(prefill=counts, decode=counts, waiting=st.booleans())
def test_both_roles_are_at_zero_together_or_neither_is(
    prefill: int, decode: int, waiting: bool
) -> None:
    pair = pair_counts(prefill=prefill, decode=decode, waiting=waiting)
    assert (pair.prefill == 0) == (pair.decode == 0)


@given(prefill=counts, decode=counts, waiting=st.booleans())
def test_no_decode_runs_without_a_prefill_peer(prefill: int, decode: int, waiting: bool) -> None:
    pair = pair_counts(prefill=prefill, decode=decode, waiting=waiting)
    assert pair.decode == 0 or pair.prefill >= 1


@given(prefill=counts, decode=counts)
def test_a_waiting_request_wakes_both_roles(prefill: int, decode: int) -> None:
    pair = pair_counts(prefill=prefill, decode=decode, waiting=True)
    assert pair.prefill >= 1
    assert pair.decode >= 1


@given(prefill=counts, decode=counts, waiting=st.booleans())
def test_the_rule_never_takes_replicas_away(prefill: int, decode: int, waiting: bool) -> None:
    pair = pair_counts(prefill=prefill, decode=decode, waiting=waiting)
    assert pair.prefill >= prefill
    assert pair.decode >= decode
    assert pair.prefill <= max(prefill, 1)
    assert pair.decode <= max(decode, 1)


@pytest.mark.parametrize(
    ("prefill", "decode", "waiting", "expected"),
    [
        (0, 0, False, (0, 0)),
        (0, 0, True, (1, 1)),
        (0, 3, False, (1, 3)),
        (2, 0, False, (2, 1)),
        (2, 0, True, (2, 1)),
        (2, 5, False, (2, 5)),
    ],
    ids=["idle-sleeps", "wake", "decode-busy", "prefill-busy", "prefill-busy-waiting", "both"],
)
def test_examples(prefill: int, decode: int, waiting: bool, expected: tuple[int, int]) -> None:
    pair = pair_counts(prefill=prefill, decode=decode, waiting=waiting)
    assert (pair.prefill, pair.decode) == expected


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="recommended counts must be >= 0"):
        pair_counts(prefill=-1, decode=0, waiting=False)
    with pytest.raises(ValueError, match="replica counts must be >= 0"):
        PairCounts(prefill=0, decode=-2)


def test_asleep() -> None:
    assert pair_counts(prefill=0, decode=0, waiting=False).asleep
    assert not pair_counts(prefill=0, decode=0, waiting=True).asleep
