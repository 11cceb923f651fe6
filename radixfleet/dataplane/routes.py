"""Which revision serves a tenant's model: the routing table, built from the cluster; pure.

A tenant owns the InferenceServices in its namespaces (as the gate read them from the
Tenants), and a model is named by its InferenceService, so two tenants may each have a model
called `chat`: the table is keyed by (tenant, model), and a tenant's key never resolves
another tenant's model.
A model's targets are KServe's traffic status of its predictor (the revisions with a share), so
the entry splits a canary exactly as KServe says; a model whose status has no share yet has no
target, and its requests wait for one. While a canary's rollout runs a baseline with a ready
pod (its CanaryPolicy's status, radixfleet/controllers/canary/README.md), the baseline (the stable
revision's `baseline` pods, behind their own router) is sent as much as the canary, out of the
stable revision's share (`radixfleet.revisions.pick_revision`, as the twin and the local fleet
split).

A Standard-mode model (KServe's raw Deployments: a multi-node one always) has no revisions and
no traffic split: its one target is its head's Deployment, `<isvc>-predictor`, named where a
revision's name stands, and marked `knative=False`: it is never at zero, and no activator holds
its requests while its head is not ready.

A prefill/decode model (two InferenceServices, `<model>-prefill` and `<model>-decode`, labelled
`radixfleet.io/model=<model>` and `radixfleet.io/pd-role`) is one model to its tenants, and
neither half is routable: its one target names the model (its router, `<model>-router`, routes
to both roles) and carries the revisions of both roles with a share, which the entry wakes
through Knative's activator before it lets a request reach the router of a pair at zero. While
either role has no revision with a share yet, it has no target.

A LoRA model's adapters are models of their own, `BASE:ADAPTER` as SGLang names them: the
adapters its predictor preloads (`--lora-paths` in the InferenceService's model args, which
`radixfleet render` writes from the catalog: each tenant's base holds exactly the adapters that
tenant sees, so another tenant's adapter is no model of this tenant's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from radixfleet.labels import BASELINE_POOL, MODEL, PD_ROLE, SERVING_POOL
from radixfleet.platform import head_deployment, is_standard_mode
from radixfleet.revisions import BASELINE, CANARY, pick_revision
from radixfleet.sglang_flags import lora_path_entry, lora_path_specs

FINAL_PHASES = ("Promoted", "RolledBack")  # a CanaryPolicy rollout's, as its status writes them


@dataclass(frozen=True)
class Target:
    """A revision serving a share of its model's requests."""

    namespace: str
    revision: str
    percent: int
    pool: str = SERVING_POOL  # `baseline`: the revision's baseline pods, behind their router
    # A Knative revision (woken from zero by the activator); False: a Standard-mode model's
    # head Deployment, named in `revision`, reached only through its router.
    knative: bool = True
    # A prefill/decode model (named in `revision`): the Knative revisions of both its roles,
    # all woken before a request goes to its router.
    wakes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelRoute:
    """A tenant's model and the revisions that serve it."""

    tenant: str
    model: str
    namespace: str
    targets: tuple[Target, ...] = ()
    baseline: str | None = None  # the stable revision, while its baseline serves a canary
    created: int = 0  # the InferenceService's creation, in Unix seconds (OpenAI's `created`)
    adapters: tuple[str, ...] = ()  # a LoRA model's adapters, by name (`adapters_of`)

    def pick(self, draw: float) -> Target | None:
        """The target whose share holds `draw` (in [0, 100)); None with no target."""
        split = self._canary_split()
        if split is not None:
            stable, canary = split
            which = pick_revision(draw / 100, weight=canary.percent, canary=True, baseline=True)
            if which == BASELINE:
                return replace(stable, pool=BASELINE_POOL)
            return canary if which == CANARY else stable
        total = sum(t.percent for t in self.targets)
        point = draw * total / 100
        for target in self.targets:
            if point < target.percent:
                return target
            point -= target.percent
        return self.targets[-1] if self.targets else None

    def _canary_split(self) -> tuple[Target, Target] | None:
        """(stable, canary) when a baseline serves beside a canary of this model."""
        if self.baseline is None or len(self.targets) != 2:
            return None
        stable = [t for t in self.targets if t.revision == self.baseline]
        canary = [t for t in self.targets if t.revision != self.baseline]
        return (stable[0], canary[0]) if stable and canary else None


@dataclass(frozen=True)
class Routes:
    """Every tenant's models. Empty until the entry has read the cluster once."""

    models: Mapping[tuple[str, str], ModelRoute] = field(default_factory=dict)

    def resolve(self, tenant: str, model: str) -> ModelRoute | None:
        """The tenant's model of that name, if the tenant has one."""
        return self.models.get((tenant, model))

    def of(self, tenant: str) -> list[ModelRoute]:
        """The tenant's models, by name."""
        return sorted((r for (t, _), r in self.models.items() if t == tenant), key=_name)

    def namespaces(self) -> set[str]:
        """Every namespace a route leads to."""
        return {route.namespace for route in self.models.values()}

    def served(self) -> set[tuple[str, str]]:
        """Every (namespace, model) a route leads to."""
        return {(route.namespace, route.model) for route in self.models.values()}

    def revisions(self) -> set[tuple[str, str]]:
        """Every (namespace, revision) a route leads to."""
        return {(t.namespace, t.revision) for r in self.models.values() for t in r.targets}


def _name(route: ModelRoute) -> str:
    return route.model


def build_routes(
    namespaces: Mapping[str, Iterable[str]],
    isvcs: Iterable[Mapping[str, Any]],
    baselines: Mapping[tuple[str, str], str] | None = None,
) -> Routes:
    """The table of each tenant's namespaces and the InferenceServices as listed from the API
    server; `baselines` are the stable revisions, by (namespace, InferenceService), whose
    baseline serves (`baselines_of`). A namespace two tenants claim serves neither (the quota
    controller reports it)."""
    owner = _namespace_owners(namespaces)
    models: dict[tuple[str, str], ModelRoute] = {}
    pairs: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for isvc in sorted(isvcs, key=_where):
        meta = isvc.get("metadata") or {}
        tenant = owner.get(str(meta.get("namespace", "")))
        if tenant is None:
            continue
        name, namespace = str(meta.get("name", "")), str(meta["namespace"])
        labels = meta.get("labels") or {}
        if labels.get(PD_ROLE) and labels.get(MODEL):
            pairs.setdefault((namespace, str(labels[MODEL])), {})[str(labels[PD_ROLE])] = isvc
            continue
        route = ModelRoute(tenant=tenant, model=name, namespace=namespace,
                           targets=targets_of(isvc), created=_created(meta),
                           baseline=(baselines or {}).get((namespace, name)),
                           adapters=adapters_of(isvc))  # fmt: skip
        models.setdefault((tenant, route.model), route)  # first namespace of a tenant wins
    for (namespace, model), roles in sorted(pairs.items()):
        route = _pair_route(owner[namespace], namespace, model, roles)
        models.setdefault((route.tenant, model), route)
    return Routes(models)


def _pair_route(
    tenant: str, namespace: str, model: str, roles: Mapping[str, Mapping[str, Any]]
) -> ModelRoute:
    """A prefill/decode model's one route: a target once both roles have a revision with a
    share (the decode's creation dates the model)."""
    prefill, decode = roles.get("prefill"), roles.get("decode")
    created = _created((decode or {}).get("metadata") or {})
    if prefill is None or decode is None:
        return ModelRoute(tenant=tenant, model=model, namespace=namespace, created=created)
    wakes = tuple(t.revision for role in (prefill, decode) for t in targets_of(role))
    ready = all(targets_of(role) for role in (prefill, decode))
    targets = (Target(namespace, model, 100, wakes=wakes),) if ready else ()
    return ModelRoute(tenant=tenant, model=model, namespace=namespace, targets=targets,
                      created=created)  # fmt: skip


def _created(meta: Mapping[str, Any]) -> int:
    """`metadata.creationTimestamp` (RFC 3339, UTC) in Unix seconds; 0 when absent."""
    stamp = meta.get("creationTimestamp")
    try:
        return int(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def _where(isvc: Mapping[str, Any]) -> tuple[str, str]:
    meta = isvc.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _namespace_owners(namespaces: Mapping[str, Iterable[str]]) -> dict[str, str]:
    claims: dict[str, set[str]] = {}
    for tenant, owned in namespaces.items():
        for namespace in owned:
            claims.setdefault(namespace, set()).add(tenant)
    return {ns: next(iter(names)) for ns, names in claims.items() if len(names) == 1}


def targets_of(isvc: Mapping[str, Any]) -> tuple[Target, ...]:
    """KServe's traffic status of the predictor, as targets with a share (merged by revision);
    a Standard-mode model's head, whole, from its first sight (ready or not: its router says)."""
    meta = isvc.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    if is_standard_mode(isvc):
        return (Target(namespace, head_deployment(str(meta.get("name", ""))), 100, knative=False),)
    predictor = ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
    shares: dict[str, int] = {}
    for entry in predictor.get("traffic") or []:
        revision, percent = entry.get("revisionName"), entry.get("percent")
        if isinstance(revision, str) and isinstance(percent, int) and percent > 0:
            shares[revision] = shares.get(revision, 0) + percent
    return tuple(Target(namespace, r, p) for r, p in sorted(shares.items()))


def adapters_of(isvc: Mapping[str, Any]) -> tuple[str, ...]:
    """The LoRA adapters the predictor preloads, by name: its model's `--lora-paths`. An entry
    SGLang could not read either is left out (SGLang refuses to start with it, so no pod serves
    it), rather than failing every tenant's routes."""
    model = (((isvc.get("spec") or {}).get("predictor") or {}).get("model")) or {}
    args = model.get("args") or []
    names: list[str] = []
    for spec in lora_path_specs([str(arg) for arg in args]):
        try:
            names.append(lora_path_entry(spec).name)
        except ValueError:
            continue
    return tuple(dict.fromkeys(names))


def split_adapter(model: str) -> tuple[str, str | None]:
    """`BASE:ADAPTER` as (BASE, ADAPTER); a model's own name as (name, None). An
    InferenceService's name is a DNS label, so the first colon ends it."""
    base, colon, adapter = model.partition(":")
    return (base, adapter) if colon and adapter else (model, None)


def baselines_of(policies: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """The stable revision of each (namespace, InferenceService) whose rollout in progress has a
    baseline with a ready pod, from the CanaryPolicies' statuses."""
    found: dict[tuple[str, str], str] = {}
    for policy in policies:
        namespace = str((policy.get("metadata") or {}).get("namespace", ""))
        for rollout in (policy.get("status") or {}).get("rollouts") or []:
            baseline = rollout.get("baseline") or {}
            revision, ready = baseline.get("revision"), baseline.get("ready")
            if rollout.get("phase") in FINAL_PHASES or not isinstance(revision, str):
                continue
            if isinstance(ready, int) and ready > 0:
                found[(namespace, str(rollout.get("inferenceService", "")))] = revision
    return found
