"""The routers' decisions: which revisions get a router, when one is replaced or deleted."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet import dataplane
from radixfleet.controllers.routers.decide import Existing, Key, Plan, RevisionRef, decide, wanted
from radixfleet.controllers.routers.manifests import deployment
from radixfleet.controllers.routers.spec import Router, smg_args
from radixfleet.dataplane import router_name

IMAGE = "smg@sha256:aa"


def isvc(
    name: str = "chat",
    namespace: str = "team-a",
    *,
    tenant: str | None = "a",
    traffic: list[tuple[str, int]] | None = None,
    latest_ready: str | None = None,
    rolled_out: str | None = None,
    created: str | None = None,
) -> dict[str, Any]:
    """An InferenceService as KServe reports it; `traffic=None`: no predictor status yet."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if tenant is not None:
        meta["labels"] = {"radixfleet.io/tenant": tenant}
    found: dict[str, Any] = {"metadata": meta}
    if traffic is not None:
        predictor: dict[str, Any] = {
            "traffic": [{"revisionName": r, "percent": p} for r, p in traffic]
        }
        if latest_ready:
            predictor["latestReadyRevision"] = latest_ready
        if rolled_out:
            predictor["latestRolledoutRevision"] = rolled_out
        if created:
            predictor["latestCreatedRevision"] = created
        found["status"] = {"components": {"predictor": predictor}}
    return found


def key(revision: str, namespace: str = "team-a") -> Key:
    return namespace, router_name(revision)


UIDS = {("team-a", f"r{i}"): RevisionRef(f"uid-r{i}") for i in range(1, 5)}
UIDS[("team-a", "chat-predictor-00001")] = RevisionRef("uid-1")


def test_a_serving_revision_gets_a_router_named_after_it_and_owned_by_the_revision() -> None:
    plan = decide([isvc(traffic=[("chat-predictor-00001", 100)])], UIDS, {}, image=IMAGE)
    (router,) = plan.apply
    assert router == Router("team-a", "chat-predictor-00001", "chat", "a", revision_uid="uid-1")
    assert router.name == "chat-predictor-00001-router"
    assert plan.park == ()


def test_a_canary_and_its_stable_revision_each_hold_the_key_their_own_pods_read() -> None:
    """A rotation's new revision reads the Secret's new key and the stable one the old: each
    router presents its own revision's, or its workers would refuse it."""
    revisions = {("team-a", "r1"): RevisionRef("uid-r1"),
                 ("team-a", "r2"): RevisionRef("uid-r2", data_plane_key="api-key-2")}  # fmt: skip
    found = isvc(traffic=[("r1", 90), ("r2", 10)], latest_ready="r2")
    plan = decide([found], revisions, {}, image=IMAGE)
    held = {r.revision: deployment(r, image=IMAGE)["spec"]["template"]["spec"]["containers"][0]
            for r in plan.apply}  # fmt: skip
    assert {r: c["env"] for r, c in held.items()} == {
        "r1": [dataplane.env_var("api-key")], "r2": [dataplane.env_var("api-key-2")],
    }  # fmt: skip
    assert all("--api-key=$(RADIXFLEET_DATA_PLANE_KEY)" in c["args"] for c in held.values())


def test_a_revision_not_listed_yet_waits_for_its_uid() -> None:
    assert decide([isvc(traffic=[("r9", 100)])], UIDS, {}, image=IMAGE) == Plan()


def test_a_canary_at_zero_percent_has_its_router_before_its_first_step() -> None:
    found = isvc(traffic=[("r1", 100), ("r2", 0)], latest_ready="r2")
    assert {r.revision for r in wanted(found) or set()} == {"r1", "r2"}


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        pytest.param(isvc(tenant=None, traffic=[("r1", 100)]), set(), id="not-a-tenants-model"),
        pytest.param(isvc(traffic=None), None, id="no-status-yet"),
        pytest.param(isvc(traffic=[("r1", 90), ("r2", 10)]), {"r1", "r2"}, id="canary-split"),
        pytest.param(isvc(traffic=[("r1", 50), ("r1", 50)]), {"r1"}, id="one-revision-twice"),
    ],
)
def test_wanted_routers(found: dict[str, Any], expected: set[str] | None) -> None:
    routers = wanted(found)
    assert (None if routers is None else {r.revision for r in routers}) == expected


@pytest.mark.parametrize(
    "found",
    [pytest.param(Existing("chat", "smg@sha256:old"), id="another-image"),
     pytest.param(Existing("chat", IMAGE, replicas=0), id="parked-and-serving-again")],
)  # fmt: skip
def test_a_stale_router_is_applied_again(found: Existing) -> None:
    plan = decide([isvc(traffic=[("r1", 100)])], UIDS, {key("r1"): found}, image=IMAGE)
    assert [r.revision for r in plan.apply] == ["r1"]


TOKENIZER = "radixfleet.io/tokenizer"


@pytest.mark.parametrize(
    ("source", "flags", "writes"),
    [
        pytest.param("hf://org/model", "--model-path org/model", True, id="hub-repository"),
        pytest.param("/opt/smg/tokenizers/m", "--tokenizer-path /opt/smg/tokenizers/m", False,
                     id="folder-in-the-image"),
    ],
)  # fmt: skip
def test_the_models_tokenizer_is_loaded_by_its_routers_and_a_new_one_applies_them_again(
    source: str, flags: str, writes: bool
) -> None:
    model = isvc(traffic=[("r1", 100)])
    model["metadata"]["annotations"] = {TOKENIZER: source}
    (router,) = decide([model], UIDS, {}, image=IMAGE).apply
    assert flags in " ".join(smg_args(router))
    made = deployment(router, image=IMAGE)
    assert made["metadata"]["annotations"][TOKENIZER] == source
    pod = made["spec"]["template"]["spec"]
    assert ("volumes" in pod) == writes  # the hub's files are fetched into /tmp
    same = {key("r1"): Existing("chat", IMAGE, tokenizer=source)}
    assert decide([model], UIDS, same, image=IMAGE) == Plan()
    before = {key("r1"): Existing("chat", IMAGE)}  # made before the model named its tokenizer
    assert [r.revision for r in decide([model], UIDS, before, image=IMAGE).apply] == ["r1"]


def test_a_router_of_a_model_without_a_tokenizer_loads_none() -> None:
    (router,) = decide([isvc(traffic=[("r1", 100)])], UIDS, {}, image=IMAGE).apply
    assert not {"--model-path", "--tokenizer-path"} & set(smg_args(router))


def test_a_router_whose_revision_left_the_traffic_is_parked_once() -> None:
    existing = {key("r1"): Existing("chat", IMAGE), key("r2"): Existing("chat", IMAGE)}
    model = isvc(traffic=[("r2", 100)], latest_ready="r2")
    assert decide([model], UIDS, existing, image=IMAGE) == Plan(park=(key("r1"),))
    existing[key("r1")] = Existing("chat", IMAGE, replicas=0)
    assert decide([model], UIDS, existing, image=IMAGE) == Plan()


@pytest.mark.parametrize(
    "isvcs",
    [pytest.param([], id="model-gone"), pytest.param([isvc(traffic=None)], id="status-missing")],
)
def test_routers_are_kept_when_their_model_says_nothing(isvcs: list[dict[str, Any]]) -> None:
    """Gone: the garbage collector removes them with their owner. No status: halt, not guess."""
    assert decide(isvcs, UIDS, {key("r1"): Existing("chat", IMAGE)}, image=IMAGE) == Plan()


def test_smg_finds_the_revisions_pods_and_sends_to_their_queue_proxy() -> None:
    args = smg_args(Router("team-a", "chat-predictor-00002", "chat"))
    joined = " ".join(args)
    assert "--service-discovery --selector serving.knative.dev/revision=chat-predictor-00002" in (
        joined
    )
    assert "--service-discovery-namespace team-a" in joined
    assert "--service-discovery-port 8012" in joined
    assert "--policy cache_aware" in joined


@pytest.mark.parametrize(
    ("pooled", "selector"),
    [
        pytest.param(
            True,
            "--selector serving.knative.dev/revision=r5 radixfleet.io/pool=serving --",
            id="pods-with-a-pool-label-only-serving-ones",
        ),
        pytest.param(
            False, "--selector serving.knative.dev/revision=r5 --", id="made-before-the-label-all"
        ),
    ],
)
def test_a_revision_whose_pods_carry_the_pool_label_is_routed_to_its_serving_pods_only(
    pooled: bool, selector: str
) -> None:
    """A pod pre-warming (`radixfleet.io/pool: warming`) is out of its router's selection."""
    revisions = {("team-a", "r5"): RevisionRef("uid-r5", pooled=pooled)}
    (router,) = decide([isvc(traffic=[("r5", 100)])], revisions, {}, image=IMAGE).apply
    assert router.pooled is pooled
    assert selector in " ".join(smg_args(router))


revisions = st.sampled_from(["r1", "r2", "r3", "r4"])
splits = st.lists(st.tuples(revisions, st.integers(0, 100)), max_size=4)


@given(
    traffic=splits,
    stale=st.dictionaries(revisions, st.integers(0, 1), max_size=4),
    latest=st.none() | revisions,
)
def test_after_acting_on_a_plan_the_next_is_empty_and_exactly_the_serving_routers_run(
    traffic: list[tuple[str, int]], stale: dict[str, int], latest: str | None
) -> None:
    found = isvc(traffic=traffic, latest_ready=latest)
    existing = {key(r): Existing("chat", "smg@sha256:old", n) for r, n in stale.items()}
    plan = decide([found], UIDS, existing, image=IMAGE)
    serving = {r for r, p in traffic if p} | ({latest} if latest else set())
    assert not set(plan.park) & {key(r) for r in serving}
    after = existing | {k: Existing("chat", v.image, 0) for k, v in existing.items()
                        if k in plan.park}  # fmt: skip
    after |= {(r.namespace, r.name): Existing(r.isvc, IMAGE) for r in plan.apply}
    assert decide([found], UIDS, after, image=IMAGE) == Plan()
    assert {k for k, v in after.items() if v.replicas} == {key(r) for r in serving}


POOLED = {("team-a", r): RevisionRef(f"uid-{r}", pooled=True) for r in ("r1", "r2")}


@pytest.mark.parametrize(
    ("traffic", "baseline"),
    [
        pytest.param([("r1", 90), ("r2", 10)], True, id="canary-taking-traffic"),
        pytest.param([("r1", 100), ("r2", 0)], False, id="canary-at-0-before-or-after"),
        pytest.param([("r2", 100)], False, id="promoted"),
    ],
)
def test_while_a_canary_takes_traffic_the_stable_revision_has_a_baseline_router(
    traffic: list[tuple[str, int]], baseline: bool
) -> None:
    found = isvc(traffic=traffic, latest_ready="r2", rolled_out="r1", created="r2")
    plan = decide([found], POOLED, {}, image=IMAGE)
    baselines = [r for r in plan.apply if r.pool == "baseline"]
    assert bool(baselines) is baseline
    if baselines:
        (router,) = baselines
        assert (router.revision, router.name) == ("r1", "r1-baseline-router")
        selector = "--selector serving.knative.dev/revision=r1 radixfleet.io/pool=baseline --"
        assert selector in " ".join(smg_args(router))


def test_a_baseline_router_is_apart_from_its_revisions_own_and_parked_after_the_rollout() -> None:
    from radixfleet.controllers.routers.manifests import deployment, service

    found = isvc(traffic=[("r1", 80), ("r2", 20)], latest_ready="r2", rolled_out="r1", created="r2")
    plan = decide([found], POOLED, {}, image=IMAGE)
    own, base = (next(r for r in plan.apply if r.revision == "r1" and r.pool == pool)
                 for pool in ("serving", "baseline"))  # fmt: skip
    # Neither Service selects the other's smg pods (a Service picks every pod its labels match).
    for a, b in ((own, base), (base, own)):
        selector = service(a, image=IMAGE)["spec"]["selector"].items()
        labels = deployment(b, image=IMAGE)["spec"]["template"]["metadata"]["labels"].items()
        assert not selector <= labels
    existing = {(r.namespace, r.name): Existing(r.isvc, IMAGE) for r in plan.apply}
    rolled_back = isvc(traffic=[("r1", 100), ("r2", 0)], latest_ready="r2", rolled_out="r1",
                       created="r2")  # fmt: skip
    assert decide([rolled_back], POOLED, existing, image=IMAGE).park == (
        ("team-a", "r1-baseline-router"),
    )


def test_a_revision_without_the_pool_label_gets_no_baseline_router() -> None:
    """Its smg would select every pod of the revision: the stable's whole load."""
    found = isvc(traffic=[("r1", 90), ("r2", 10)], rolled_out="r1", created="r2")
    assert {(r.revision, r.pool) for r in decide([found], UIDS, {}, image=IMAGE).apply} == {
        ("r1", "serving"), ("r2", "serving"),
    }  # fmt: skip


def test_a_gated_tokenizers_router_reads_the_hub_token_by_reference_and_a_new_one_applies() -> None:
    model = isvc(traffic=[("r1", 100)])
    secret = "radixfleet.io/hf-token-secret"
    model["metadata"]["annotations"] = {TOKENIZER: "hf://meta-llama/m", secret: "hf-token/HF_TOKEN"}
    (router,) = decide([model], UIDS, {}, image=IMAGE).apply
    (container,) = deployment(router, image=IMAGE)["spec"]["template"]["spec"]["containers"]
    token = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
    by_reference = {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert token == [{"name": "HF_TOKEN", "valueFrom": by_reference}]
    without = {key("r1"): Existing("chat", IMAGE, tokenizer="hf://meta-llama/m")}
    assert [r.revision for r in decide([model], UIDS, without, image=IMAGE).apply] == ["r1"]


def standard(name: str = "big", *, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Standard-mode InferenceService (KServe's raw Deployments), as a multi-node model is."""
    found = isvc(name)
    found["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "Standard"}
    if status is not None:
        found["status"] = status
    return found


HEADS = {("team-a", "big-predictor"): RevisionRef("uid-head", data_plane_key="api-key-2")}


@pytest.mark.parametrize(
    "status",
    [None, {"deploymentMode": "Standard"}, {"deploymentMode": "RawDeployment",
                                            "components": {"predictor": {}}}],
    ids=["no-status-yet", "reconciled", "the-modes-old-name"],
)  # fmt: skip
def test_a_standard_mode_model_gets_one_router_for_its_head_owned_by_its_deployment(
    status: dict[str, Any] | None,
) -> None:
    plan = decide([standard(status=status)], HEADS, {}, image=IMAGE)
    (router,) = plan.apply
    assert (router.name, router.revision_uid, router.standard) == (
        "big-predictor-router", "uid-head", True)  # fmt: skip
    assert router.data_plane_key == "api-key-2", "the key the head's pods read"
    owner = deployment(router, image=IMAGE)["metadata"]["ownerReferences"]
    assert owner == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "big-predictor",
                      "uid": "uid-head"}]  # fmt: skip


def test_a_standard_mode_models_router_waits_for_its_heads_deployment() -> None:
    assert decide([standard()], UIDS, {}, image=IMAGE) == Plan()


def test_the_status_mode_wins_over_the_annotation() -> None:
    """The cluster's default mode, or an annotation KServe did not follow, is what it says."""
    knative = standard(status={"deploymentMode": "Knative", "components": {"predictor": {
        "traffic": [{"revisionName": "r1", "percent": 100}]}}})  # fmt: skip
    (router,) = decide([knative], UIDS, {}, image=IMAGE).apply
    assert (router.revision, router.standard) == ("r1", False)


def test_smg_of_a_standard_mode_model_sends_to_its_heads_pods_on_sglangs_port() -> None:
    """Rank 0 alone serves HTTP: the workers (`app=isvc.big-predictor-worker`) are left out,
    and no queue-proxy stands in front of a raw Deployment's pods."""
    joined = " ".join(smg_args(Router("team-a", "big-predictor", "big", standard=True)))
    assert "--selector app=isvc.big-predictor --service-discovery-namespace team-a" in joined
    assert "--service-discovery-port 8080" in joined


def pd_role(role: str, *, model: str = "big-pd", uid: str | None = None) -> dict[str, Any]:
    """One role's InferenceService of a prefill/decode model, as the catalog renders it."""
    found = isvc(f"{model}-{role}", traffic=None)
    found["metadata"]["labels"] |= {"radixfleet.io/model": model, "radixfleet.io/pd-role": role}
    if uid is not None:
        found["metadata"]["uid"] = uid
    return found


def test_a_prefill_decode_model_gets_one_router_owned_by_its_decode() -> None:
    """One router for the pair, from its first sight (no revision to wait for): named after the
    model, owned by the decode InferenceService, so it goes with the model."""
    plan = decide([pd_role("prefill"), pd_role("decode")], {}, {}, image=IMAGE)
    (router,) = plan.apply
    assert (router.name, router.isvc, router.pd, router.revision_uid) == (
        "big-pd-router", "big-pd-decode", True, "uid-big-pd-decode")  # fmt: skip
    owner = deployment(router, image=IMAGE)["metadata"]["ownerReferences"]
    assert owner == [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                      "name": "big-pd-decode", "uid": "uid-big-pd-decode"}]  # fmt: skip


@pytest.mark.parametrize(
    ("found", "expected"),
    [(pd_role("prefill"), set()), (pd_role("decode", uid=""), set()),
     (pd_role("decode"), {"big-pd-router"})],
    ids=["the-prefill-has-none-of-its-own", "a-decode-without-uid-waits", "the-decode-has-it"],
)  # fmt: skip
def test_wanted_routers_of_a_prefill_decode_model(
    found: dict[str, Any], expected: set[str]
) -> None:
    assert {r.name for r in wanted(found) or set()} == expected


def test_a_prefill_decode_router_once_applied_stays() -> None:
    """After acting on the plan, the next pass changes nothing (its Existing matches it)."""
    existing = {key("big-pd"): Existing(isvc="big-pd-decode", image=IMAGE)}
    assert decide([pd_role("prefill"), pd_role("decode")], {}, existing, image=IMAGE) == Plan()


def test_smg_of_a_prefill_decode_model_runs_in_pd_mode_over_each_roles_serving_pods() -> None:
    """PD mode with a selector per role (the label only KServe's pods of the role's
    InferenceService may carry, and the serving pool: a pre-warming pod stays out), cache-aware
    prefill, and no plain `--selector`, which smg ignores in PD mode; both roles on their
    queue-proxy port, where Knative counts them."""
    args = smg_args(Router("team-a", "big-pd", "big-pd-decode", pd=True))
    joined = " ".join(args)
    pods = "serving.kserve.io/inferenceservice=big-pd-{} radixfleet.io/pool=serving"
    assert "--pd-disaggregation" in args
    assert f"--prefill-selector {pods.format('prefill')} --decode-selector" in joined
    assert f"--decode-selector {pods.format('decode')} --prefill-policy" in joined
    assert "--prefill-policy cache_aware --decode-policy power_of_two" in joined
    assert "--selector" not in args and "--policy" not in args
    assert "--service-discovery-port 8012" in joined
