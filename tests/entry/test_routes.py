"""The entry's routing table: per-tenant model names, KServe's split, claimed namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.controllers.routers.spec import Router
from radixfleet.dataplane import ROUTER_PORT
from radixfleet.dataplane.routes import ModelRoute, Target, baselines_of, build_routes, targets_of
from radixfleet.entry.server import Upstreams


def isvc(name: str, namespace: str, traffic: list[tuple[str, int]] | None) -> dict[str, Any]:
    found: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}}
    if traffic is not None:
        entries = [{"revisionName": r, "percent": p} for r, p in traffic]
        found["status"] = {"components": {"predictor": {"traffic": entries}}}
    return found


NAMESPACES = {"blue": ["team-blue"], "green": ["team-green", "team-green-2"]}


def test_two_tenants_own_a_model_of_the_same_name_and_each_key_reaches_its_own() -> None:
    routes = build_routes(NAMESPACES, [
        isvc("chat", "team-blue", [("chat-predictor-00001", 100)]),
        isvc("chat", "team-green", [("chat-predictor-00003", 100)]),
    ])  # fmt: skip
    blue, green = routes.resolve("blue", "chat"), routes.resolve("green", "chat")
    assert blue is not None and green is not None
    assert blue.targets == (Target("team-blue", "chat-predictor-00001", 100),)
    assert green.targets == (Target("team-green", "chat-predictor-00003", 100),)


@pytest.mark.parametrize(
    ("namespaces", "found", "expected"),
    [
        pytest.param(NAMESPACES, isvc("chat", "elsewhere", [("r", 100)]), {}, id="unclaimed"),
        pytest.param({"blue": ["shared"], "green": ["shared"]},
                     isvc("chat", "shared", [("r", 100)]), {}, id="claimed-twice"),
        pytest.param(NAMESPACES, isvc("chat", "team-green-2", None),
                     {("green", "chat"): ()}, id="no-status-no-target"),
    ],
)  # fmt: skip
def test_who_owns_what(
    namespaces: dict[str, list[str]], found: dict[str, Any], expected: dict[Any, Any]
) -> None:
    routes = build_routes(namespaces, [found])
    assert {k: r.targets for k, r in routes.models.items()} == expected


def test_a_tenant_sees_only_its_models() -> None:
    routes = build_routes(NAMESPACES, [isvc("a", "team-blue", []), isvc("b", "team-green", [])])
    assert [r.model for r in routes.of("blue")] == ["a"]
    assert routes.resolve("blue", "b") is None


def test_kserves_split_is_read_with_zero_shares_left_out() -> None:
    found = isvc("chat", "ns", [("r1", 90), ("r2", 10), ("r3", 0), ("r1", 0)])
    assert targets_of(found) == (Target("ns", "r1", 90), Target("ns", "r2", 10))


@given(
    shares=st.lists(st.integers(1, 100), min_size=1, max_size=4),
    draws=st.lists(st.floats(0, 100, exclude_max=True), min_size=1, max_size=50),
)
def test_each_revision_gets_draws_in_proportion_to_its_share(
    shares: list[int], draws: list[float]
) -> None:
    targets = tuple(Target("ns", f"r{i}", p) for i, p in enumerate(shares))
    route = ModelRoute("t", "m", "ns", targets)
    total = sum(shares)
    for draw in draws:
        picked = route.pick(draw)
        assert picked is not None
        low = sum(shares[: targets.index(picked)]) * 100 / total
        assert low <= draw < low + picked.percent * 100 / total + 1e-9
    assert ModelRoute("t", "m", "ns").pick(50.0) is None


def policy(namespace: str, *rollouts: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "default", "namespace": namespace},
            "status": {"rollouts": list(rollouts)}}  # fmt: skip


def rollout(isvc: str, phase: str, baseline: dict[str, Any] | None) -> dict[str, Any]:
    found: dict[str, Any] = {"inferenceService": isvc, "phase": phase}
    return found if baseline is None else found | {"baseline": baseline}


def test_a_rollout_in_progress_with_a_ready_baseline_names_its_stable_revision() -> None:
    policies = [
        policy("team-blue", rollout("chat", "Progressing", {"revision": "r1", "ready": 1}),
               rollout("code", "Progressing", {"revision": "r7", "ready": 0}),  # not yet
               rollout("done", "Promoted", {"revision": "r4", "ready": 1}),
               rollout("plain", "Progressing", None)),
        policy("team-green", rollout("chat", "Halted", {"revision": "r2", "ready": 2})),
        {"metadata": {"namespace": "x"}},  # no status yet
    ]  # fmt: skip
    assert baselines_of(policies) == {("team-blue", "chat"): "r1", ("team-green", "chat"): "r2"}


def test_beside_a_baseline_the_canarys_share_goes_to_it_out_of_the_stables() -> None:
    found = isvc("chat", "team-blue", [("r1", 80), ("r2", 20)])
    routes = build_routes(NAMESPACES, [found], {("team-blue", "chat"): "r1"})
    route = routes.resolve("blue", "chat")
    assert route is not None
    picked = [route.pick(draw + 0.5) for draw in range(100)]
    assert picked.count(Target("team-blue", "r2", 20)) == 20
    assert picked.count(Target("team-blue", "r1", 80, pool="baseline")) == 20
    assert picked.count(Target("team-blue", "r1", 80)) == 60
    # the baseline's router is its own; the Knative way is the stable revision's
    upstreams = Upstreams()
    baseline = Target("team-blue", "r1", 80, pool="baseline")
    assert upstreams.router(baseline).startswith("http://r1-baseline-router.team-blue.svc.")
    assert upstreams.knative(baseline) == upstreams.knative(Target("team-blue", "r1", 80))


@pytest.mark.parametrize("pool", ["serving", "baseline"])
def test_the_entry_sends_to_the_router_the_routers_controller_makes(pool: str) -> None:
    router = Router(namespace="team-blue", revision="r1", isvc="chat", pooled=True, pool=pool)
    url = Upstreams().router(Target("team-blue", "r1", 80, pool=pool))
    assert url.startswith(f"http://{router.name}.team-blue.svc.cluster.local:{ROUTER_PORT}")


@pytest.mark.parametrize(
    "traffic",
    [pytest.param([("r1", 100)], id="no-canary-any-more"),
     pytest.param([("r2", 60), ("r3", 40)], id="the-baselines-revision-serves-no-more")],
)  # fmt: skip
def test_without_a_canary_beside_its_revision_a_baseline_gets_nothing(
    traffic: list[tuple[str, int]],
) -> None:
    route = build_routes(NAMESPACES, [isvc("chat", "team-blue", traffic)],
                         {("team-blue", "chat"): "r1"}).resolve("blue", "chat")  # fmt: skip
    assert route is not None
    assert all(route.pick(d + 0.5) in route.targets for d in range(100))


@pytest.mark.parametrize("mode", ["Standard", "RawDeployment"])
def test_a_standard_mode_models_one_target_is_its_head_reached_only_through_its_router(
    mode: str,
) -> None:
    isvc = {"metadata": {"name": "big", "namespace": "team-blue",
                         "annotations": {"serving.kserve.io/deploymentMode": mode}}}  # fmt: skip
    (target,) = targets_of(isvc)
    assert target == Target("team-blue", "big-predictor", 100, knative=False)
    router = Router(namespace="team-blue", revision="big-predictor", isvc="big", standard=True)
    assert Upstreams().router(target).startswith(f"http://{router.name}.team-blue.svc")


def test_a_knative_models_targets_are_knatives() -> None:
    isvc = {"metadata": {"name": "chat", "namespace": "team-blue"},
            "status": {"components": {"predictor": {"traffic": [
                {"revisionName": "r1", "percent": 100}]}}}}  # fmt: skip
    assert targets_of(isvc) == (Target("team-blue", "r1", 100, knative=True),)


def pd_role(role: str, traffic: list[tuple[str, int]] | None, *, model: str = "big-pd",
            namespace: str = "team-blue") -> dict[str, Any]:  # fmt: skip
    """One role's InferenceService of a prefill/decode model, as the catalog renders it."""
    found = isvc(f"{model}-{role}", namespace, traffic)
    found["metadata"]["labels"] = {"radixfleet.io/model": model, "radixfleet.io/pd-role": role}
    return found


def test_a_prefill_decode_model_is_one_route_and_its_halves_none() -> None:
    """The tenant calls the pair by its name; its one target is the pair's router, carrying
    both roles' revisions for the entry to wake."""
    routes = build_routes(NAMESPACES, [
        pd_role("prefill", [("big-pd-prefill-predictor-00001", 100)]),
        pd_role("decode", [("big-pd-decode-predictor-00002", 100)]),
    ])  # fmt: skip
    assert [r.model for r in routes.of("blue")] == ["big-pd"]
    assert routes.resolve("blue", "big-pd-prefill") is None
    assert routes.resolve("blue", "big-pd-decode") is None
    route = routes.resolve("blue", "big-pd")
    assert route is not None
    (target,) = route.targets
    assert target == Target("team-blue", "big-pd", 100, wakes=(
        "big-pd-prefill-predictor-00001", "big-pd-decode-predictor-00002"))  # fmt: skip
    router = Router(namespace="team-blue", revision="big-pd", isvc="big-pd-decode", pd=True)
    assert Upstreams().router(target) == f"http://{router.name}.team-blue.svc.cluster.local:8000"


@pytest.mark.parametrize(
    "roles",
    [
        [pd_role("prefill", [("p1", 100)])],
        [pd_role("prefill", [("p1", 100)]), pd_role("decode", None)],
        [pd_role("prefill", []), pd_role("decode", [("d1", 100)])],
    ],
    ids=["no-decode-yet", "decode-without-status", "prefill-without-share"],
)
def test_a_prefill_decode_model_has_no_target_until_both_roles_have_a_revision(
    roles: list[dict[str, Any]],
) -> None:
    """A request waits (503, Retry-After) rather than reach a pair with a role missing."""
    route = build_routes(NAMESPACES, roles).resolve("blue", "big-pd")
    assert route is not None and route.targets == ()
