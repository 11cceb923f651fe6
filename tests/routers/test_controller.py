"""The routers' act layer on recording fakes: it applies, re-checks before parking, and halts
without an image."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from radixfleet.controllers.routers.controller import Controller
from radixfleet.controllers.routers.decide import Existing, Key, RevisionRef
from radixfleet.controllers.routers.spec import Router
from radixfleet.dataplane import router_name
from radixfleet.kit.errors import KubeError
from tests.routers.test_decide import IMAGE, UIDS, isvc

NOW = datetime(2026, 11, 25, tzinfo=UTC)


@dataclass
class FakeInferenceServices:
    """Lists `listed`; `get` answers from `current` (what a re-read would see)."""

    listed: list[dict[str, Any]]
    current: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def everywhere(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.listed)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.current.get((namespace, name)))


@dataclass
class FakeRevisions:
    extra: dict[Key, RevisionRef] = field(default_factory=dict)

    def listed(self) -> dict[Key, RevisionRef]:
        return {**UIDS, **self.extra}


@dataclass
class FakeRouters:
    found: dict[Key, Existing] = field(default_factory=dict)
    applied: list[tuple[Router, str]] = field(default_factory=list)
    parked: list[Key] = field(default_factory=list)
    keyed: list[str] = field(default_factory=list)

    def existing(self) -> dict[Key, Existing]:
        return dict(self.found)

    refuse_namespaces: set[str] = field(default_factory=set)  # where writes are Forbidden

    def apply(self, router: Router, *, image: str) -> None:
        if router.namespace in self.refuse_namespaces:
            raise KubeError(f"apply router {router.namespace}: HTTP 403 forbidden", status=403)
        self.applied.append((router, image))
        self.found[(router.namespace, router.name)] = Existing(router.isvc, image)

    def park(self, key: Key) -> None:
        self.parked.append(key)
        self.found[key] = Existing(self.found[key].isvc, self.found[key].image, 0)

    refuse_keys: set[str] = field(default_factory=set)  # namespaces whose key creation fails

    def ensure_key(self, namespace: str) -> None:
        if namespace in self.refuse_keys:
            raise KubeError(f"create secret {namespace}: HTTP 403 being terminated", status=403)
        self.keyed.append(namespace)


def test_a_pass_applies_the_missing_router_and_a_second_pass_does_nothing() -> None:
    model = isvc(traffic=[("r1", 100)])
    routers = FakeRouters()
    controller = Controller(FakeInferenceServices([model]), FakeRevisions(), routers, IMAGE)
    controller.reconcile(now=NOW)
    controller.reconcile(now=NOW)
    assert [(r.revision, image) for r, image in routers.applied] == [("r1", IMAGE)]


def test_a_router_is_not_parked_when_the_re_read_finds_its_revision_serving_again() -> None:
    """KServe moved traffic back (a rollback) between the list and the park."""
    stale = ("team-a", router_name("r1"))
    listed = isvc(traffic=[("r2", 100)], latest_ready="r2")
    rolled_back = isvc(traffic=[("r1", 100)], latest_ready="r2")
    isvcs = FakeInferenceServices([listed], {("team-a", "chat"): rolled_back})
    routers = FakeRouters({stale: Existing("chat", IMAGE)})
    Controller(isvcs, FakeRevisions(), routers, IMAGE).reconcile(now=NOW)
    assert routers.parked == []
    isvcs.current[("team-a", "chat")] = listed
    Controller(isvcs, FakeRevisions(), routers, IMAGE).reconcile(now=NOW)
    assert routers.parked == [stale]


def test_without_a_router_image_the_controller_changes_nothing() -> None:
    routers = FakeRouters({("team-a", router_name("r0")): Existing("chat", IMAGE)})
    models = FakeInferenceServices([isvc(traffic=[("r1", 100)])])
    controller = Controller(models, FakeRevisions(), routers, None)
    assert controller.reconcile(now=NOW).verbs == []
    assert routers.applied == [] and routers.parked == []


def test_each_tenant_namespace_gets_its_data_plane_key_once_status_or_not() -> None:
    models = [
        isvc(traffic=None),
        isvc("other", "team-b", traffic=[("r1", 100)]),
        isvc("loose", "no-tenant", tenant=None),
    ]
    routers = FakeRouters()
    controller = Controller(FakeInferenceServices(models), FakeRevisions(), routers, None)
    controller.reconcile(now=NOW)
    controller.reconcile(now=NOW)
    # Before any status and without a router image: a predictor cannot start without its key.
    assert routers.keyed == ["team-a", "team-b"]


def test_a_namespace_whose_key_cannot_be_made_holds_back_no_other_router() -> None:
    """Seen on the test cluster: a tenant namespace being deleted refuses new Secrets (403);
    every other model's router must still be applied, and the key is tried again next pass."""
    models = [isvc("gone", "team-gone", traffic=[("r1", 100)]), isvc(traffic=[("r1", 100)])]
    routers = FakeRouters(refuse_keys={"team-gone"})
    controller = Controller(FakeInferenceServices(models), FakeRevisions(), routers, IMAGE)
    controller.reconcile(now=NOW)
    assert routers.keyed == ["team-a"]
    assert {(r.namespace, r.revision) for r, _ in routers.applied} >= {("team-a", "r1")}
    routers.refuse_keys.clear()
    controller.reconcile(now=NOW)
    assert routers.keyed == ["team-a", "team-gone"]


def test_a_router_refused_in_one_namespace_holds_back_no_other_apply_or_park() -> None:
    """Seen on the test cluster: an InferenceService in a namespace whose tenant access was never
    rendered (the operator may write Deployments only in tenant namespaces) stopped the pass at
    its router, and another tenant's stale router was never parked."""
    stale = ("team-a", router_name("r0"))
    models = [isvc("hand-made", "team-x", traffic=[("r1", 100)]), isvc(traffic=[("r1", 100)])]
    isvcs = FakeInferenceServices(models, {("team-a", "chat"): models[1]})
    routers = FakeRouters({stale: Existing("chat", IMAGE)}, refuse_namespaces={"team-x"})
    revisions = FakeRevisions({("team-x", "r1"): RevisionRef("uid-x")})
    controller = Controller(isvcs, revisions, routers, IMAGE)
    try:
        controller.reconcile(now=NOW)
    except KubeError as error:
        assert error.status == 403
    else:
        raise AssertionError("the refusal must fail the pass, so the loop tries it again")
    assert {(r.namespace, r.revision) for r, _ in routers.applied} == {("team-a", "r1")}
    assert routers.parked == [stale]
