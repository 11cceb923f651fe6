"""The ValidatingAdmissionPolicy that admits InferenceServices against their tenant's GPU budget.

Why a ValidatingAdmissionPolicy and not a webhook: CEL in the API server needs no server,
certificate or extra availability to run, and it can express the check once each Tenant
carries its own accounting. CEL cannot list the other InferenceServices or see other tenants'
usage, so the quota controller does that part and writes it into the Tenant's status: per GPU
type the ceiling (guaranteed + what may be borrowed now) and what is committed, and what each
InferenceService was counted for. The policy takes every Tenant as a parameter (selector `{}`;
the API server ANDs the results); the Tenant that governs the request's namespace checks

    committed by the others + maxReplicas x GPUs per replica <= ceiling

The price is a short window of staleness: two InferenceServices created before the controller
counts the first are both checked against the same numbers. The controller then reports the
tenant `WithinBudget=False` and its ResourceQuota keeps pods within the ceiling. A webhook
would narrow that window but not close it across controller replicas, at the cost of a TLS
server in the admission path of every InferenceService.

The CEL below spells `asks.ask_of` and `decide.admit`; a test evaluates both on the same inputs
and requires the same verdict and message. `radixfleet quota admission-policy` prints the YAML.
"""

from __future__ import annotations

from typing import Any

from radixfleet import labels
from radixfleet.controllers.quota import quota_writes
from radixfleet.controllers.quota.spec import API_VERSION, KIND
from radixfleet.kit.errors import RETRY_SHORTLY

POLICY_NAME = "inferenceservice-gpu-budget.radixfleet.io"
# The rendered copy for running the quota on its own (`radixfleet quota run`); a test keeps it
# current. The operator's base deploy/operator/ and the Pulumi program install the same
# objects through the quota's plug-in.
MANIFEST_PATH = "radixfleet/controllers/quota/admission-policy.yaml"
BINDING_NAME = POLICY_NAME

PREDICTOR = "object.spec.predictor"
BUDGET = "params.spec.gpuBudget[variables.gpuType]"
ACCOUNT = "params.status.gpus[variables.gpuType]"


def guarded(path: str) -> str:
    """`has()` for every field of a dotted path: CEL fails on a field of a missing object."""
    root, *fields = path.split(".")
    prefixes = [".".join([root, *fields[: i + 1]]) for i in range(len(fields))]
    return " && ".join(f"has({p})" for p in prefixes)


def _map_int(mapping: str, key: str) -> str:
    """`int(mapping[key])`, or 0 when the map or the key is absent."""
    return f"{guarded(mapping)} && '{key}' in {mapping} ? int({mapping}['{key}']) : 0"


def _annotation(key: str) -> str:
    m = "object.metadata.annotations"
    return f"{guarded(m)} && '{key}' in {m} ? {m}['{key}'] : ''"


def _deny(message: str) -> str:
    return f"'tenant ' + params.metadata.name + ': ' + {message}"


# Each (name, expression); later ones read earlier ones as `variables.NAME`.
VARIABLES: tuple[tuple[str, str], ...] = (
    ("accounted", "has(params.status) && has(params.status.namespaces)"),
    (
        "governed",
        "variables.accounted ? request.namespace in params.status.namespaces"
        " : request.namespace in params.spec.namespaces",
    ),
    ("key", "request.namespace + '/' + object.metadata.name"),
    ("gpuType", _annotation(labels.GPU_TYPE)),
    ("annotated", _annotation(labels.GPUS_PER_REPLICA)),
    ("annotatedGpus", "variables.annotated == '' ? 0 : int(variables.annotated)"),
    ("limitGpus", _map_int(f"{PREDICTOR}.model.resources.limits", labels.GPU_RESOURCE)),
    ("requestGpus", _map_int(f"{PREDICTOR}.model.resources.requests", labels.GPU_RESOURCE)),
    (
        "podGpus",
        "variables.limitGpus > variables.requestGpus ? variables.limitGpus : variables.requestGpus",
    ),
    (
        "nodes",
        f"{guarded(PREDICTOR + '.workerSpec.pipelineParallelSize')}"
        f" ? int({PREDICTOR}.workerSpec.pipelineParallelSize) : 1",
    ),
    ("requested", "variables.podGpus == 0 ? 0 : variables.podGpus * variables.nodes"),
    (
        "perReplica",
        "variables.annotatedGpus > variables.requested"
        " ? variables.annotatedGpus : variables.requested",
    ),
    ("maxReplicas", f"{guarded(PREDICTOR + '.maxReplicas')} ? int({PREDICTOR}.maxReplicas) : 0"),
    ("gpus", "variables.perReplica * variables.maxReplicas"),
    # What this InferenceService was counted for of the same GPU type; -1 when not counted.
    (
        "mine",
        "variables.accounted && has(params.status.commitments)"
        " && variables.key in params.status.commitments"
        " && params.status.commitments[variables.key].gpuType == variables.gpuType"
        " ? params.status.commitments[variables.key].gpus : -1",
    ),
    (
        "budgeted",
        f"{guarded('params.spec.gpuBudget')} && variables.gpuType in params.spec.gpuBudget",
    ),
    ("guaranteed", f"variables.budgeted ? {BUDGET}.guaranteed : 0"),
    ("borrow", f"variables.budgeted && has({BUDGET}.borrow) ? {BUDGET}.borrow : 0"),
    (
        "hasAccount",
        "variables.accounted && has(params.status.gpus) && variables.gpuType in params.status.gpus",
    ),
    ("accountCeiling", f"variables.hasAccount ? {ACCOUNT}.ceiling : 0"),
    ("accountBorrowable", f"variables.hasAccount ? {ACCOUNT}.borrowable : 0"),
    ("accountCommitted", f"variables.hasAccount ? {ACCOUNT}.committed : 0"),
    # Never past the spec: it may have shrunk since the status was written.
    ("specCeiling", "variables.guaranteed + variables.borrow"),
    (
        "ceiling",
        "variables.accountCeiling < variables.specCeiling"
        " ? variables.accountCeiling : variables.specCeiling",
    ),
    (
        "borrowableNow",
        "variables.accountBorrowable < variables.borrow"
        " ? variables.accountBorrowable : variables.borrow",
    ),
    ("others", "variables.accountCommitted - (variables.mine > 0 ? variables.mine : 0)"),
)

NO_TYPE = _deny(f"variables.key + ' asks for GPUs without the {labels.GPU_TYPE} annotation'")
UNBOUNDED = _deny(
    "variables.key + ' asks for ' + string(variables.perReplica) + ' GPUs per replica without"
    " maxReplicas: an unbounded InferenceService cannot fit a GPU budget'"
)
NO_BUDGET = _deny(
    "variables.key + ' asks for ' + variables.gpuType + ' GPUs; the tenant has no '"
    " + variables.gpuType + ' budget'"
)
NOT_ACCOUNTED = _deny(
    "'its ' + variables.gpuType + ' budget is not accounted yet by the quota controller"
    f" (see the Tenant\\'s conditions); {RETRY_SHORTLY}'"
)
EXCEEDED = _deny(
    "variables.gpuType + ' budget exceeded: ' + variables.key + ' asks for '"
    " + string(variables.gpus) + ' GPUs (maxReplicas ' + string(variables.maxReplicas)"
    " + ' x ' + string(variables.perReplica) + ' GPUs), ' + string(variables.others)"
    " + ' are committed by its other InferenceServices, and the ceiling is '"
    " + string(variables.ceiling) + ' (' + string(variables.guaranteed)"
    " + ' guaranteed + ' + string(variables.borrowableNow) + ' borrowable now of '"
    " + string(variables.borrow) + ')'"
)

# '' admits; anything else is the denial. One cascade, in the order of `decide.admit`.
VERDICT = f"""\
!variables.governed || variables.perReplica <= 0 ? '' :
variables.gpuType == '' ? {NO_TYPE} :
variables.maxReplicas <= 0 ? {UNBOUNDED} :
variables.mine >= 0 && variables.gpus <= variables.mine ? '' :
!variables.budgeted ? {NO_BUDGET} :
!variables.hasAccount ? {NOT_ACCOUNTED} :
variables.others + variables.gpus <= variables.ceiling ? '' :
{EXCEEDED}"""


def policy() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes >= 1.30)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {
            # An error in CEL (say, a non-integer GPU count) denies rather than lets through.
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": f"{labels.GROUP}/{API_VERSION}", "kind": KIND},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["serving.kserve.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["inferenceservices"],
                    }
                ]
            },
            "variables": [
                {"name": n, "expression": e} for n, e in (*VARIABLES, ("verdict", VERDICT))
            ],
            "validations": [
                {
                    "expression": "variables.verdict == ''",
                    "messageExpression": "variables.verdict",
                    "reason": "Forbidden",
                }
            ],
        },
    }


def binding() -> dict[str, Any]:
    """Binds the policy to every Tenant; with no Tenant at all there is no budget to hold."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": BINDING_NAME, "labels": {labels.MANAGED_BY: labels.MANAGER}},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
        },
    }


def manifests() -> list[dict[str, Any]]:
    """The quota's admission policies: the GPU budget's, and the one that holds the operator's
    ResourceQuota writes to its own (quota_writes.py)."""
    return [policy(), binding(), *quota_writes.manifests()]
