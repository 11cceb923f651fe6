"""The catalog's rules for a prefill/decode model, one `Finding` per broken rule (crosscheck.py
runs them with every other rule of a model)."""

from __future__ import annotations

from collections.abc import Iterator

from radixfleet.config.catalog import PD_RUNTIME, Catalog, Model
from radixfleet.config.errors import Finding

# The runtimes of a prefill/decode model's roles: never a catalog model's own.
_ROLE_RUNTIMES = ("sglang-prefill", "sglang-decode")


def pd_pair(catalog: Catalog, loc: str, model: Model) -> Iterator[Finding]:
    """A prefill/decode model is one entry: runtime sglang-pd with its `disaggregation`, its
    replica bounds per role, and no canary (a pair needs one rollout of both roles, which the
    canary controller cannot roll yet)."""
    pd = model.disaggregation is not None
    if model.runtime in _ROLE_RUNTIMES:
        yield (f"{loc}.runtime", f"{model.runtime} is a role of a prefill/decode model: write one "
               f"model with runtime {PD_RUNTIME} and disaggregation")  # fmt: skip
    elif pd != (model.runtime == PD_RUNTIME):
        field = "disaggregation" if pd else "runtime"
        yield f"{loc}.{field}", f"runtime {PD_RUNTIME} and disaggregation go together"
    if not pd:
        return
    if model.canary_policy is not None:
        yield (f"{loc}.canary_policy", "a prefill/decode model cannot roll out as one yet: no "
               "canary (its roles would roll apart)")  # fmt: skip
    for bound in sorted({"min_replicas", "max_replicas"} & model.model_fields_set):
        yield (f"{loc}.{bound}", "a prefill/decode model's replicas are per role: "
               f"disaggregation.prefill.{bound} and disaggregation.decode.{bound}")  # fmt: skip
    taken = {m.name for m in catalog.models}
    for role in ("prefill", "decode"):
        if f"{model.name}-{role}" in taken:
            isvc = f"{model.name}-{role}"
            yield f"{loc}.name", f"its {role} InferenceService {isvc} is a model's name"
