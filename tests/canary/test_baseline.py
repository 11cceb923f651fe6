"""When a rollout runs its baseline, and which stable pods make it in a cluster: the cases by
name, then the carving's rules over any mix of pods (Hypothesis)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.controllers.canary.baseline import Carving, Pod, action, carve, release
from radixfleet.controllers.canary.state import BaselineStatus, Observed, Phase, RolloutStatus
from tests.canary.test_decide import obs, rollout

S, C = "llama-predictor-00001", "llama-predictor-00002"


def stable(name: str, pool: str = "serving", *, ready: bool = True) -> Pod:
    return Pod(name, S, pool, ready)


def canary(name: str, *, ready: bool = True) -> Pod:
    return Pod(name, C, "serving", ready)


CASES = [
    ([stable("a"), stable("b"), canary("c")], Carving((("a", "baseline"),), 1), "one-of-two"),
    ([stable("a"), canary("c")], Carving((), 0, possible=False), "never-the-last-serving-pod"),
    ([stable("a", ""), stable("b", ""), canary("c")], Carving((), 0, possible=False), "unpooled"),
    ([stable("a", "baseline"), stable("b"), canary("c")], Carving((), 1), "already-carved"),
    ([stable("a"), stable("b"), stable("d"), canary("c"), canary("e")],
     Carving((("a", "baseline"), ("b", "baseline")), 2), "as-many-as-the-canary-has-ready"),
    ([stable("a", "baseline"), stable("b", "baseline"), stable("d"), canary("c")],
     Carving((("b", "serving"),), 1), "one-too-many-goes-back"),
    ([stable("a", "baseline", ready=False), stable("b"), stable("d"), canary("c")],
     Carving((("b", "baseline"), ("a", "serving")), 1), "an-unready-one-is-replaced"),
    ([stable("a"), stable("b", "warming"), canary("c", ready=False)],
     Carving((), 0, possible=False), "a-warming-pod-is-not-serving"),
    ([stable("a"), stable("b"), canary("c", ready=False)], Carving((("a", "baseline"),), 1),
     "at-least-one-before-the-canary-is-ready"),
]  # fmt: skip


@pytest.mark.parametrize(("pods", "expected"), [c[:2] for c in CASES], ids=[c[2] for c in CASES])
def test_carve(pods: Sequence[Pod], expected: Carving) -> None:
    assert carve(pods, stable=S, canary=C) == expected


def test_release_puts_every_baseline_pod_back() -> None:
    pods = [stable("a", "baseline"), stable("b", "baseline", ready=False), stable("d")]
    assert release(pods) == (("a", "serving"), ("b", "serving"))


pods_strategy = st.lists(
    st.builds(
        Pod,
        name=st.text("abcdefgh", min_size=1, max_size=3),
        revision=st.sampled_from([S, C, "other-00003"]),
        pool=st.sampled_from(["serving", "baseline", "warming", ""]),
        ready=st.booleans(),
    ),
    max_size=12,
    unique_by=lambda p: p.name,
)


def _after(pods: Sequence[Pod], moves: Sequence[tuple[str, str]]) -> list[Pod]:
    pool = dict(moves)
    return [Pod(p.name, p.revision, pool.get(p.name, p.pool), p.ready) for p in pods]


@settings(max_examples=300, deadline=None)
@given(pods_strategy)
def test_the_stable_revision_keeps_a_serving_pod_and_the_carving_settles(
    pods: list[Pod],
) -> None:
    carving = carve(pods, stable=S, canary=C)
    moved = {name for name, _ in carving.moves}
    assert moved <= {p.name for p in pods if p.revision == S}  # only the stable's pods move
    after = _after(pods, carving.moves)
    serving_before = [p for p in pods if p.revision == S and p.pool == "serving" and p.ready]
    serving_after = [p for p in after if p.revision == S and p.pool == "serving" and p.ready]
    if serving_before:
        assert serving_after  # never the last serving pod
    baseline = [p for p in after if p.revision == S and p.pool == "baseline"]
    assert all(p.ready for p in baseline) and len(baseline) == carving.ready
    canary_ready = sum(p.ready for p in pods if p.revision == C)
    assert carving.ready <= max(1, canary_ready)
    assert carving.possible == (carving.ready > 0)
    assert carve(after, stable=S, canary=C) == Carving((), carving.ready, carving.possible)


RUNS = BaselineStatus(revision=S, ready=1)
ACTIONS = [
    (True, obs(), rollout(), rollout(), "ensure", "asked-and-the-canary-is-ready"),
    (True, obs(canary_ready=False), None, rollout(), "release", "not-before-the-canary-is-ready"),
    (True, obs(canary_ready=False), rollout(baseline=RUNS), rollout(baseline=RUNS), "ensure",
     "kept-while-the-canary-restarts"),
    (True, obs(), rollout(), rollout(phase=Phase.PROMOTED), "release", "the-rollout-ended"),
    (True, obs(stable_revision=None), None, rollout(), "release", "no-stable-revision"),
    (False, obs(), rollout(), rollout(), None, "never-asked-no-call"),
    (False, obs(), rollout(baseline=RUNS), rollout(), "release", "asked-no-more-one-recorded"),
    (False, obs(), None, None, None, "no-rollout"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("asked", "observed", "before", "status", "expected"),
    [a[:5] for a in ACTIONS],
    ids=[a[5] for a in ACTIONS],
)
def test_when_a_rollout_runs_its_baseline(
    asked: bool,
    observed: Observed,
    before: RolloutStatus | None,
    status: RolloutStatus | None,
    expected: str | None,
) -> None:
    assert action(asked=asked, observed=observed, before=before, status=status) == expected
