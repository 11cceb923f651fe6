"""Decide which routers should exist, from the InferenceServices as KServe reports them; pure.

Rules, in order:

1. Only a model of a tenant (`radixfleet.io/tenant` on the InferenceService) gets routers.
2. A revision gets a router while it takes traffic (a non-zero percent in KServe's traffic
   status) or is the latest ready one (a canary at 0% has its router before its first step).
   Its smg selects the revision's pods, and of those only the `serving` pool when the
   revision's pods carry `radixfleet.io/pool` (`RevisionRef.pooled`, read from the Revision's
   labels): a pod the autoscaler is pre-warming stays out until it is warm. Its smg holds the
   data plane's key the revision's pods hold (`RevisionRef.data_plane_key`): a revision is
   pinned to one key of the Secret, so a rotation never parts a router from its workers.
3. While a canary takes traffic beside the stable revision (`latestCreatedRevision` and
   `latestRolledoutRevision` both with a share), the stable revision also gets a baseline
   router, selecting its pods of the `baseline` pool, if its pods carry the pool label at all.
   A canary rolled back to 0% has none: its baseline router is parked.
4. An InferenceService without a predictor status yet says nothing: its routers stay as they
   are (halt, don't guess). A revision not listed yet (no UID to own its router) waits for the
   next pass.
5. A router is applied (one replica) when it is missing, runs another image or tokenizer (the
   InferenceService's `radixfleet.io/tokenizer`, which smg loads to count prompts for the
   entry, with the hub token of `radixfleet.io/hf-token-secret` for a gated one) or was
   parked; it is parked (zero replicas) when its InferenceService reports a status without its
   revision.
   Routers are never deleted: each is owned by its Knative Revision, and Kubernetes' garbage
   collector removes it with the revision (so the operator needs no delete permission).
6. A Standard-mode model (KServe's raw Deployments; every multi-node model) gets one router,
   for its head's Deployment (`<isvc>-predictor`, where a revision's name stands, and its owner),
   from its first sight: it has no revisions, no traffic split and no pools to wait for. Its
   router waits for the head's Deployment to be listed (its UID), as a revision's does.
7. A prefill/decode model (InferenceServices labelled `radixfleet.io/pd-role`) gets one router
   in PD mode, `<model>-router`, from its decode InferenceService's first sight, owned by that
   InferenceService (its roles' revisions come and go under one router); the prefill's
   InferenceService gets none of its own.
8. Every namespace with a model of a tenant holds the data plane's key (radixfleet.dataplane)
   from the first sight of the model, status or not: its predictor pods cannot start without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from radixfleet import dataplane, labels
from radixfleet.controllers.routers.spec import Router
from radixfleet.platform import head_deployment, is_standard_mode

Key = tuple[str, str]  # (namespace, name): a router's, or a revision's


@dataclass(frozen=True)
class RevisionRef:
    """What a router needs of its Knative Revision: its UID (the router's owner), whether its
    pods carry `radixfleet.io/pool` (the revision's labels are its template's), and the key of
    the data plane's Secret its pods read (the router must hold the same)."""

    uid: str
    pooled: bool = False
    data_plane_key: str = dataplane.KEY


@dataclass(frozen=True)
class Existing:
    """A router found in the cluster: whose it is, which image and tokenizer it runs, how many
    replicas."""

    isvc: str
    image: str
    replicas: int = 1
    tokenizer: str = ""
    hub_token: str = ""


@dataclass(frozen=True)
class Plan:
    """Routers to apply (create, update or wake) and to park, each sorted."""

    apply: tuple[Router, ...] = ()
    park: tuple[Key, ...] = ()

    @property
    def verbs(self) -> list[str]:
        """One verb per action, for the controller's decision counter."""
        return ["apply"] * len(self.apply) + ["park"] * len(self.park)


def keyed_namespaces(isvcs: Iterable[Mapping[str, Any]]) -> set[str]:
    """The namespaces that must hold the data plane's key: those with a model of a tenant."""
    metas = [isvc.get("metadata") or {} for isvc in isvcs]
    return {m["namespace"] for m in metas if (m.get("labels") or {}).get(labels.TENANT)}


def wanted(isvc: Mapping[str, Any]) -> set[Router] | None:
    """The routers an InferenceService should have; None while KServe has said nothing."""
    meta = isvc.get("metadata") or {}
    tenant = (meta.get("labels") or {}).get(labels.TENANT)
    if not tenant:
        return set()
    annotations = meta.get("annotations") or {}
    place: dict[str, Any] = {"namespace": meta["namespace"], "isvc": meta["name"], "tenant": tenant,
             "tokenizer": annotations.get(labels.TOKENIZER, ""),
             "hub_token": annotations.get(labels.HF_TOKEN_SECRET, "")}  # fmt: skip
    role = (meta.get("labels") or {}).get(labels.PD_ROLE)
    if role is not None:
        return _pd_router(meta, role, place)
    if is_standard_mode(isvc):
        return {Router(revision=head_deployment(meta["name"]), standard=True, **place)}
    predictor = ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
    if not predictor:
        return None
    traffic = {t.get("revisionName") for t in predictor.get("traffic") or [] if t.get("percent")}
    serving = {*traffic, predictor.get("latestReadyRevision")}
    routers = {Router(revision=r, **place) for r in serving if isinstance(r, str) and r}
    stable, canary = (
        predictor.get("latestRolledoutRevision"),
        predictor.get("latestCreatedRevision"),
    )
    if isinstance(stable, str) and stable != canary and {stable, canary} <= traffic:
        routers.add(Router(revision=stable, pool=labels.BASELINE_POOL, **place))
    return routers


def _pd_router(meta: Mapping[str, Any], role: str, place: dict[str, Any]) -> set[Router]:
    """A prefill/decode model's one router, from its decode InferenceService (which owns it)."""
    model = (meta.get("labels") or {}).get(labels.MODEL)
    if role != "decode" or not model or not meta.get("uid"):
        return set()
    return {Router(revision=model, pd=True, revision_uid=meta["uid"], **place)}


def _owner(router: Router, revisions: Mapping[Key, RevisionRef]) -> RevisionRef | None:
    """What owns the router: its revision (or head Deployment), or a prefill/decode model's
    decode InferenceService, whose pods carry the pool label."""
    if router.pd:
        return RevisionRef(uid=router.revision_uid, pooled=True)
    return revisions.get((router.namespace, router.revision))


def decide(
    isvcs: Iterable[Mapping[str, Any]],
    revisions: Mapping[Key, RevisionRef],
    existing: Mapping[Key, Existing],
    *,
    image: str,
) -> Plan:
    """What to apply and park so that exactly the wanted routers serve, on `image`."""
    want: dict[Key, Router] = {}
    reported: set[Key] = set()  # (namespace, InferenceService) whose status speaks
    for isvc in isvcs:
        routers = wanted(isvc)
        if routers is None:
            continue
        meta = isvc["metadata"]
        reported.add((meta["namespace"], meta["name"]))
        want |= {(r.namespace, r.name): r for r in routers}
    apply = [
        replace(r, revision_uid=ref.uid, pooled=ref.pooled, data_plane_key=ref.data_plane_key)
        for key, r in want.items()
        if (ref := _owner(r, revisions))
        and (ref.pooled or r.pool == labels.SERVING_POOL)
        and _stale(existing.get(key), image, r)
    ]
    park = [
        key for key, found in existing.items()
        if key not in want and found.replicas != 0 and (key[0], found.isvc) in reported
    ]  # fmt: skip
    return Plan(apply=tuple(sorted(apply)), park=tuple(sorted(park)))


def _stale(found: Existing | None, image: str, router: Router) -> bool:
    return (found is None or found.image != image or found.replicas == 0
            or found.tokenizer != router.tokenizer
            or found.hub_token != router.hub_token)  # fmt: skip
