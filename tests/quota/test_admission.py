"""The ValidatingAdmissionPolicy's CEL agrees with `decide.admit`, evaluated by cel-python.

The API server evaluates the policy; no API server here runs admission (the test server serves
CRDs only), so the CEL is run by cel-python on the same inputs as the Python reference, with the
variables evaluated in order as the API server does. Any CEL error counts as a denial, as
`failurePolicy: Fail` makes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.config.catalog import GpuBudget
from radixfleet.config.gpus import GPU_TYPES
from radixfleet.controllers.quota import admission
from radixfleet.controllers.quota.asks import BadAskError, ask_of
from radixfleet.controllers.quota.decide import TenantView, accounts, admit
from radixfleet.controllers.quota.spec import TenantSpec
from radixfleet.controllers.quota.state import Counted, TenantStatus

REPO = Path(__file__).resolve().parents[2]
ENV = celpy.Environment()
PROGRAMS = [(name, ENV.program(ENV.compile(expr))) for name, expr in admission.VARIABLES]
VERDICT = ENV.program(ENV.compile(admission.VERDICT))
NS, OTHER_NS = "team-a", "team-b"


def cel_verdict(isvc: dict[str, Any], tenant: dict[str, Any], namespace: str) -> str | None:
    """The policy's message ('' admits); None when CEL failed (the API server denies)."""
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(isvc),
        "params": celpy.json_to_cel(tenant),
        "request": celpy.json_to_cel({"namespace": namespace}),
    }
    variables: dict[celtypes.StringType, Any] = {}
    for name, program in PROGRAMS:
        # The API server evaluates a variable only when it is used: keep an error as a value
        # (CEL's `||` and `?:` absorb an error on the branch they do not take).
        try:
            value = program.evaluate({**activation, "variables": celtypes.MapType(variables)})
        except celpy.CELEvalError as error:
            value = error
        variables[celtypes.StringType(name)] = value
    try:
        verdict = VERDICT.evaluate({**activation, "variables": celtypes.MapType(variables)})
    except celpy.CELEvalError:
        return None
    return str(verdict)


def python_verdict(isvc: dict[str, Any], tenant: dict[str, Any], namespace: str) -> str | None:
    spec = TenantSpec.model_validate(tenant["spec"])
    view = TenantView(
        tenant["metadata"]["name"],
        spec.namespaces,
        spec.to_tenant("x").gpu_budget,
        TenantStatus.from_wire(tenant.get("status")),
    )
    if not view.governs(namespace):
        return ""
    try:
        verdict = admit(ask_of(isvc), view)
    except BadAskError:
        return None
    return "" if verdict.allowed else verdict.message


# ---- generated InferenceServices and Tenants ------------------------------------------------

maybe = st.one_of
count = st.integers(0, 6)


@st.composite
def isvcs(draw: st.DrawFn) -> dict[str, Any]:
    annotations = {}
    # Weighted towards asks that reach the budget check, where the arithmetic is.
    gpu_type = draw(st.sampled_from(["H100"] * 6 + ["H200", "", None]))
    if gpu_type is not None:
        annotations["radixfleet.io/gpu-type"] = gpu_type
    per_replica = draw(st.sampled_from([None, "0", "1", "2", "2", "3", "4", "-1", "four"]))
    if per_replica is not None:
        annotations["radixfleet.io/gpus-per-replica"] = per_replica
    predictor: dict[str, Any] = {}
    if (max_replicas := draw(st.sampled_from([None, 0, 1, 2, 3, 4, 5, 6]))) is not None:
        predictor["maxReplicas"] = max_replicas
    resources = {
        kind: {"nvidia.com/gpu": draw(maybe(count, count.map(str)))}
        for kind in draw(st.sets(st.sampled_from(["limits", "requests"])))
    }
    if resources or draw(st.booleans()):
        predictor["model"] = {"resources": resources} if resources else {}
    if draw(st.booleans()):
        predictor["workerSpec"] = {"pipelineParallelSize": draw(st.integers(1, 3))}
    return {
        "metadata": {"name": "llama", "namespace": NS, "annotations": annotations},
        "spec": {"predictor": predictor},
    }


@st.composite
def tenants(draw: st.DrawFn) -> dict[str, Any]:
    budget = {"H100": draw(st.builds(GpuBudget, guaranteed=count, borrow=count))}
    if draw(st.booleans()):
        budget = draw(st.sampled_from([{}, {**budget, "H200": GpuBudget(guaranteed=2)}]))
    tenant: dict[str, Any] = {
        "metadata": {"name": "a"},
        "spec": {"namespaces": [NS], "gpuBudget": {g: b.model_dump() for g, b in budget.items()}},
    }
    if draw(st.integers(0, 4)):
        tenant["status"] = draw(statuses(budget)).to_wire()
    return tenant


@st.composite
def statuses(draw: st.DrawFn, budget: dict[str, GpuBudget]) -> TenantStatus:
    # A status as the controller writes it: the tenant's accounts among others' usage.
    others = {"o": {g: GpuBudget(guaranteed=draw(count)) for g in budget}}
    committed = {t: {g: draw(st.integers(0, 12)) for g in budget} for t in ("a", "o")}
    table = accounts({"a": budget, **others}, committed)
    commitments = {}
    if draw(st.booleans()):
        commitments[f"{NS}/llama"] = Counted(
            gpu_type=draw(st.sampled_from(["H100", "H200"])), gpus=draw(st.integers(0, 12))
        )
    governed = draw(st.sampled_from([[NS], [NS], [NS], [], [OTHER_NS]]))
    return TenantStatus(namespaces=governed, gpus=table["a"], commitments=commitments)


@settings(max_examples=80, deadline=None)
@given(isvcs(), tenants(), st.sampled_from([NS, NS, NS, OTHER_NS]))
def test_cel_policy_agrees_with_decide(isvc: dict, tenant: dict, namespace: str) -> None:
    isvc["metadata"]["namespace"] = namespace
    assert cel_verdict(isvc, tenant, namespace) == python_verdict(isvc, tenant, namespace)


@st.composite
def budget_checks(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """Asks that always reach the arithmetic: typed, bounded, in an accounted namespace."""
    isvc = draw(isvcs())
    isvc["metadata"]["annotations"] = {
        "radixfleet.io/gpu-type": "H100",
        "radixfleet.io/gpus-per-replica": str(draw(st.integers(1, 4))),
    }
    isvc["spec"]["predictor"]["maxReplicas"] = draw(st.integers(1, 4))
    budget = {"H100": draw(st.builds(GpuBudget, guaranteed=count, borrow=count))}
    status = draw(statuses(budget)).model_copy(update={"namespaces": [NS]})
    tenant = {
        "metadata": {"name": "a"},
        "spec": {"namespaces": [NS], "gpuBudget": {"H100": budget["H100"].model_dump()}},
        "status": status.to_wire(),
    }
    return isvc, tenant


@settings(max_examples=60, deadline=None)
@given(budget_checks())
def test_cel_budget_arithmetic_agrees_with_decide(case: tuple[dict, dict]) -> None:
    isvc, tenant = case
    assert cel_verdict(isvc, tenant, NS) == python_verdict(isvc, tenant, NS)


def test_cel_denial_message_by_example() -> None:
    budget = {"H100": GpuBudget(guaranteed=4, borrow=2)}
    status = TenantStatus(namespaces=[NS], gpus=accounts({"a": budget}, {"a": {"H100": 2}})["a"])
    tenant = {
        "metadata": {"name": "a"},
        "spec": {"namespaces": [NS], "gpuBudget": {"H100": {"guaranteed": 4, "borrow": 2}}},
        "status": status.to_wire(),
    }
    isvc = {
        "metadata": {
            "name": "llama",
            "namespace": NS,
            "annotations": {
                "radixfleet.io/gpu-type": "H100",
                "radixfleet.io/gpus-per-replica": "2",
            },
        },
        "spec": {"predictor": {"maxReplicas": 2}},
    }
    assert cel_verdict(isvc, tenant, NS) == (
        "tenant a: H100 budget exceeded: team-a/llama asks for 4 GPUs (maxReplicas 2 x 2 GPUs), "
        "2 are committed by its other InferenceServices, and the ceiling is 4 "
        "(4 guaranteed + 0 borrowable now of 2)"
    )


# ---- the manifests -----------------------------------------------------------------------------


def test_committed_admission_policy_is_current() -> None:
    committed = list(yaml.safe_load_all((REPO / admission.MANIFEST_PATH).read_text()))
    assert committed == admission.manifests(), "run: radixfleet quota admission-policy --write"


def test_crd_knows_exactly_the_gpu_types_of_the_table() -> None:
    crd = yaml.safe_load((REPO / "deploy/crds/tenants.radixfleet.io.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rule = schema["properties"]["spec"]["properties"]["gpuBudget"]["x-kubernetes-validations"][0]
    listed = rule["rule"].split("[", 1)[1].split("]", 1)[0]
    assert [t.strip(" '") for t in listed.split(",")] == list(GPU_TYPES)


@pytest.mark.parametrize("name", [n for n, _ in admission.VARIABLES])
def test_every_variable_compiles_alone(name: str) -> None:
    # A typo in one variable would otherwise only show as a denial of everything.
    assert dict(admission.VARIABLES)[name]
