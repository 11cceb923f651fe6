"""Read a scenario file into a :class:`~radixfleet.twin.scenario.Scenario`, or fail whole.

Like the catalog's loader: every problem is reported at once as `file: entry.field: message`
(:class:`~radixfleet.config.errors.ConfigError`), and nothing runs on a file with any. Besides
the field rules on the types, the rules here relate entries: names that must exist, pools every
serving region must have, profiles that must resolve, policies that must be known, faults that
must fall inside the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from radixfleet.bounded_yaml import check_bounds
from radixfleet.config.errors import ConfigError, Problem
from radixfleet.config.load import MAX_CATALOG_BYTES, pydantic_problems, read_bounded
from radixfleet.profile import BUILTIN_PROFILES, ProfileError, resolve_profile
from radixfleet.twin.registry import KINDS, UnknownPolicyError, resolve
from radixfleet.twin.scenario import (
    CanaryRollout,
    Model,
    RegionOutage,
    ReplicaCrash,
    Scenario,
    TenantBurst,
    TraceSource,
)
from radixfleet.workload.traces import MOONCAKE_BLOCK_TOKENS

GIB = 1 << 30

Finding = tuple[str, str]


def load_scenario(path: Path) -> Scenario:
    """Load and fully check a scenario file; raise ConfigError listing every problem."""
    text = read_bounded(path, limit=MAX_CATALOG_BYTES)
    return parse_scenario(text, source=str(path), base=path.parent)


def parse_scenario(text: str, *, source: str, base: Path | None = None) -> Scenario:
    """Validate scenario YAML; relative profile and trace paths are taken from `base`."""
    try:
        check_bounds(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(source, "", f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, dict):
        raise ConfigError([Problem(source, "", "a scenario must be a mapping")])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(pydantic_problems(exc, source=source)) from exc
    scenario = _with_paths(scenario, base)
    findings = check_scenario(scenario)
    if findings:
        raise ConfigError([Problem(source, loc, msg) for loc, msg in findings])
    return scenario


def _with_paths(scenario: Scenario, base: Path | None) -> Scenario:
    """Profile and trace paths relative to the scenario file, made absolute."""
    if base is None:
        return scenario

    def absolute(value: str) -> str:
        if value in BUILTIN_PROFILES or Path(value).is_absolute():
            return value
        return str((base / value).resolve())

    models = [m.model_copy(update={"profile": absolute(m.profile)}) for m in scenario.models]
    sources = [
        s.model_copy(update={"path": absolute(s.path)})
        if isinstance(s, TraceSource) and s.path
        else s
        for s in scenario.workload.sources
    ]
    workload = scenario.workload.model_copy(update={"sources": sources})
    return scenario.model_copy(update={"models": models, "workload": workload})


def check_scenario(scenario: Scenario) -> list[Finding]:
    """Every cross-entry problem of a structurally valid scenario."""
    return [
        *_duplicates(scenario),
        *_models(scenario),
        *_tenants(scenario),
        *_sources(scenario),
        *_faults(scenario),
        *_policies(scenario),
    ]


def _duplicate(section: str, names: Sequence[str]) -> Iterator[Finding]:
    for name, count in Counter(names).items():
        if count > 1:
            index = [i for i, n in enumerate(names) if n == name][1]
            yield f"{section}[{index}].name", f"duplicate name {name!r}"


def _duplicates(scenario: Scenario) -> Iterator[Finding]:
    yield from _duplicate("regions", [r.name for r in scenario.regions])
    yield from _duplicate("models", [m.name for m in scenario.models])
    yield from _duplicate("tenants", [t.name for t in scenario.tenants])
    yield from _duplicate("policies", [p.name for p in scenario.policies])


def _models(scenario: Scenario) -> Iterator[Finding]:
    regions = {r.name: r for r in scenario.regions}
    for i, model in enumerate(scenario.models):
        loc = f"models[{i}]"
        for j, name in enumerate(model.regions):
            if name not in regions:
                yield f"{loc}.regions[{j}]", f"unknown region {name!r}"
        for name in scenario.model_regions(model):
            if name in regions and model.pool not in {p.name for p in regions[name].gpu_pools}:
                yield f"{loc}.pool", f"region {name!r} has no GPU pool {model.pool!r}"
        if model.min_replicas > model.max_replicas:
            yield f"{loc}.min_replicas", "is above max_replicas"
        if model.initial_replicas > model.max_replicas:
            yield f"{loc}.initial_replicas", "is above max_replicas"
        pair = model.disaggregation
        if pair is not None and pair.replicas > model.max_replicas:
            yield f"{loc}.disaggregation", "its prefill and decode replicas are above max_replicas"
        try:
            profile = resolve_profile(model.profile)
        except ProfileError as err:
            known = ", ".join(sorted(BUILTIN_PROFILES))
            yield f"{loc}.profile", f"not a built-in profile ({known}) nor a profile file: {err}"
            continue
        yield from _kv_tiers(loc, model, profile.kv_bytes_per_token)


def _kv_tiers(loc: str, model: Model, bytes_per_token: int) -> Iterator[Finding]:
    """Each tier holds at least one cache block of the model's profile."""
    tiers = model.kv_tiers
    if tiers is None:
        return
    block_bytes = model.block_tokens * bytes_per_token
    sizes = {"host_gib": tiers.host_gib, "storage_gib": tiers.storage_gib}
    for field, gib in sizes.items():
        if gib is not None and gib * GIB < block_bytes:
            yield (
                f"{loc}.kv_tiers.{field}",
                f"holds no cache block ({model.block_tokens} tokens are {block_bytes} bytes)",
            )


def _tenants(scenario: Scenario) -> Iterator[Finding]:
    models = {m.name for m in scenario.models}
    for i, tenant in enumerate(scenario.tenants):
        if tenant.model not in models:
            yield f"tenants[{i}].model", f"unknown model {tenant.model!r}"


def _sources(scenario: Scenario) -> Iterator[Finding]:
    tenants = {t.name: t for t in scenario.tenants}
    for i, source in enumerate(scenario.workload.sources):
        loc = f"workload.sources[{i}]"
        if source.tenant not in tenants:
            yield f"{loc}.tenant", f"unknown tenant {source.tenant!r}"
            continue
        if isinstance(source, TraceSource):
            yield from _trace(loc, source, scenario)


def _trace(loc: str, source: TraceSource, scenario: Scenario) -> Iterator[Finding]:
    if source.path is not None and not Path(source.path).is_file():
        yield f"{loc}.path", f"no such trace file {source.path!r}"
    model_name = scenario.tenant(source.tenant).model
    if source.kind == "mooncake" and model_name in {m.name for m in scenario.models}:
        block = scenario.model(model_name).block_tokens
        if MOONCAKE_BLOCK_TOKENS % block:
            yield (
                f"{loc}.kind",
                f"Mooncake's {MOONCAKE_BLOCK_TOKENS}-token blocks need a model block_tokens "
                f"that divides {MOONCAKE_BLOCK_TOKENS}; model {model_name!r} has {block}",
            )


def _faults(scenario: Scenario) -> Iterator[Finding]:
    regions = {r.name for r in scenario.regions}
    models = {m.name for m in scenario.models}
    tenants = {t.name for t in scenario.tenants}
    for i, fault in enumerate(scenario.faults):
        loc = f"faults[{i}]"
        if fault.at_s >= scenario.duration_s:
            yield (
                f"{loc}.at_s",
                f"{fault.at_s:g} s is not before the end ({scenario.duration_s:g} s)",
            )
        if isinstance(fault, RegionOutage | ReplicaCrash) and fault.region not in regions:
            yield f"{loc}.region", f"unknown region {fault.region!r}"
        if isinstance(fault, ReplicaCrash | CanaryRollout) and fault.model not in models:
            yield f"{loc}.model", f"unknown model {fault.model!r}"
        if isinstance(fault, CanaryRollout) and _is_pair(scenario, fault.model):
            yield f"{loc}.model", f"{fault.model!r} is a P/D pair: its canary is not modelled"
        if isinstance(fault, CanaryRollout):
            for j, name in enumerate(fault.regions):
                if name not in regions:
                    yield f"{loc}.regions[{j}]", f"unknown region {name!r}"
        if isinstance(fault, TenantBurst) and fault.tenant not in tenants:
            yield f"{loc}.tenant", f"unknown tenant {fault.tenant!r}"


def _is_pair(scenario: Scenario, model: str) -> bool:
    return any(m.name == model and m.disaggregation is not None for m in scenario.models)


def _policies(scenario: Scenario) -> Iterator[Finding]:
    for i, policy in enumerate(scenario.policies):
        for kind in KINDS:
            name = getattr(policy, kind)
            try:
                resolve(kind, name)
            except UnknownPolicyError as err:
                yield f"policies[{i}].{kind}", str(err)
