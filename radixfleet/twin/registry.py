"""Policies by name: the built-in baselines, the controllers' plug-ins, and `module:attribute`.

A scenario's policy set names one policy per decision. A name is a built-in below, a name a
registered controller's plug-in gives its twin policies (`ControllerPlugin.twin`, e.g. the
canary's `radixfleet` and `no_analysis`), or `package.module:factory`: a callable taking a
:class:`PolicyContext` and returning an object that implements the matching protocol of
:mod:`radixfleet.twin.interfaces`. That is how radixfleet's controllers plug in without the twin
importing them: the controller registry (`radixfleet.kit.registry`) names them as strings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from radixfleet.kit.registry import twin_policies, twin_policy
from radixfleet.profile import resolve_profile
from radixfleet.twin.autoscale import Fixed, Kpa
from radixfleet.twin.interfaces import AdmitAll
from radixfleet.twin.lora_routing import (
    AdapterKeeper,
    AdapterRouting,
    Blind,
    Holders,
    Partitioned,
    Placement,
)
from radixfleet.twin.routing import LeastLoad, RoundRobin, SmgCacheAware, TieredCacheAware
from radixfleet.twin.scenario import Model, Scenario
from radixfleet.twin.traffic import Route53, Static


@dataclass(frozen=True)
class PolicyContext:
    """What a policy factory may read: the scenario, and the model and region it serves."""

    scenario: Scenario
    model: Model | None = None
    region: str | None = None
    seed: int = 0


Factory = Callable[[PolicyContext], Any]


def _model(ctx: PolicyContext) -> Model:
    assert ctx.model is not None, "a per-model policy was built without its model"
    return ctx.model


# Replicas per adapter set under `adapter_partitioned`: two, so that the hottest adapter of a
# steep Zipf popularity (a fifth of all requests at alpha 1.2 over 1,000 adapters) fits its
# set's capacity on eight replicas, and a set survives one replica's loss.
PARTITION_REPLICAS = 2


def adapter_routing(
    ctx: PolicyContext, placement: Placement, keeper: AdapterKeeper | None = None
) -> AdapterRouting:
    """smg's cache-aware routing on its HTTP tree, among the replicas `placement` allows (and
    `keeper` keeping adapters loaded on its tick)."""
    inner = SmgCacheAware(
        ctx.scenario.router, block_tokens=_model(ctx).block_tokens, seed=ctx.seed, index="tree"
    )
    return AdapterRouting(inner, placement, keeper)


def _partitioned(ctx: PolicyContext) -> Placement:
    model = _model(ctx)
    if model.lora is None:
        return Blind()  # its requests name no adapter: the placement is never asked
    return Partitioned(model.lora, groups=max(1, model.initial_replicas // PARTITION_REPLICAS))


ROUTING: Mapping[str, Factory] = {
    "round_robin": lambda ctx: RoundRobin(),
    "least_load": lambda ctx: LeastLoad(),
    # smg 1.13 over gRPC workers: routes on the replicas' KV events.
    "smg_cache_aware": lambda ctx: SmgCacheAware(
        ctx.scenario.router, block_tokens=_model(ctx).block_tokens, seed=ctx.seed, index="event"
    ),
    # smg 1.13 over HTTP workers: its approximate tree of what it sent where.
    "smg_cache_aware_http": lambda ctx: SmgCacheAware(
        ctx.scenario.router, block_tokens=_model(ctx).block_tokens, seed=ctx.seed, index="tree"
    ),
    # Not smg's: the rule a gateway reading tiered KV events would follow (HiCache's host tier).
    "smg_cache_aware_tiered": lambda ctx: TieredCacheAware(
        ctx.scenario.router,
        block_tokens=_model(ctx).block_tokens,
        seed=ctx.seed,
        profile=resolve_profile(_model(ctx).profile),
    ),
    # Multi-LoRA (radixfleet/twin/lora.py): where a request for an adapter may go.
    # (`adapter_dynamic`, the same with the LoRA controller keeping them by demand, is the
    # controller's twin plug-in.)
    "adapter_aware": lambda ctx: adapter_routing(ctx, Holders(ctx.scenario.router)),
    "adapter_partitioned": lambda ctx: adapter_routing(ctx, _partitioned(ctx)),
    "adapter_blind": lambda ctx: adapter_routing(ctx, Blind()),
}
AUTOSCALE: Mapping[str, Factory] = {
    "kpa": lambda ctx: Kpa(),
    "fixed": lambda ctx: Fixed(_model(ctx).initial_replicas),
}
TRAFFIC: Mapping[str, Factory] = {
    "static": lambda ctx: Static([r.name for r in ctx.scenario.regions]),
    "route53": lambda ctx: Route53(ctx.scenario),
}
# The canary's policies, its own and the no-analysis baseline, come from its plug-in.
CANARY: Mapping[str, Factory] = {}
ADMISSION: Mapping[str, Factory] = {"none": lambda ctx: AdmitAll()}

KINDS: Mapping[str, Mapping[str, Factory]] = {
    "routing": ROUTING,
    "autoscale": AUTOSCALE,
    "traffic": TRAFFIC,
    "canary": CANARY,
    "admission": ADMISSION,
}


class UnknownPolicyError(ValueError):
    """A policy name that is neither built in nor an importable `module:attribute`."""


def resolve(kind: str, name: str) -> Factory:
    """The factory for policy `name` of `kind` (routing, autoscale, traffic, canary)."""
    builtins = KINDS[kind]
    if name in builtins:
        return builtins[name]
    if ":" not in name:
        name = twin_policy(kind, name) or name
    if ":" not in name:
        known = ", ".join(sorted([*builtins, *twin_policies(kind)]))
        raise UnknownPolicyError(
            f"unknown {kind} policy {name!r}; built-in: {known}, or module:attr"
        )
    module_name, _, attribute = name.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise UnknownPolicyError(f"{kind} policy {name!r} cannot be imported: {err}") from None
    if not callable(factory):
        raise UnknownPolicyError(f"{kind} policy {name!r} is not callable")
    return factory  # type: ignore[no-any-return]


def build(kind: str, name: str, ctx: PolicyContext) -> Any:
    """A fresh policy instance."""
    return resolve(kind, name)(ctx)
