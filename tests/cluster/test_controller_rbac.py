"""Each controller runs on the real cluster under its own ServiceAccount, bound to exactly the
ClusterRole radixfleet renders for it (`radixfleet.render.operator.operator_rules`, the code that
renders infra's and the kustomize base's role), and does its work without one Forbidden answer.
The whole operator then runs the same way under the union, with kopf's peering. A controller
whose role lacks one of its rules is refused by the API server, and this harness sees it. Neither
the operator nor the entry may touch a Secret outside a tenant namespace, nor read one there
that it is not told of (radixfleet/render/tenant_access.py), in the API server's own words.

Each controller is the real `radixfleet <controller> run` process (tests/cluster/controllers.py),
its Kubernetes client authenticated by the ServiceAccount's token.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from radixfleet import dataplane
from radixfleet.kit.rbac import (
    OWN_NAMESPACE,
    PolicyRule,
    cluster_role,
    namespace_role,
    role_binding,
)
from radixfleet.kit.registry import plugins
from radixfleet.platform import ENTRY_LEDGER
from radixfleet.render import entry as entry_base
from radixfleet.render.operator import operator_rules
from testbed import images, session
from testbed.cluster import Cluster
from testbed.emulated import emulated_isvc, get, model_volume
from tests.cluster import controllers
from tests.cluster.conftest import REPO

NAMESPACE = "rbac-check"
ACCOUNTS = "radixfleet-rbac"
ISVC = "guarded"
KEYS = "rbac-team-api-keys"
OURS = {"app.kubernetes.io/managed-by": "rbac-test"}
RUN_S = 35.0  # three of kopf's 10 s ticks, and start-up
# A busy CI machine can take half a minute just to import a controller (the routers process once
# began 34 s after it was started, 1 s before a fixed 35 s wait ended): each process gets until
# its first reconcile, up to this long, before it counts as having done nothing.
FIRST_TICK_S = 240.0
METRICS_PORT = 19501
ROUTER_TIMEOUT_S = 300.0
PLUGINS = {plugin.name: plugin for plugin in plugins()}
# How the API server words an RBAC refusal ('... is forbidden: User "system:serviceaccount:..."
# cannot patch resource ...'), and how kopf names one it met on a watch. An admission policy's
# refusal is also a 403, but not an RBAC one: the quota's policy (test_admission.py) may refuse a
# write until the quota controller has accounted the tenant, and says "retry shortly".


def _policies() -> list[dict[str, Any]]:
    """One object of each controller's kind, all about the one InferenceService."""
    meta = {"namespace": NAMESPACE, "labels": {"app.kubernetes.io/managed-by": "rbac-test"}}
    group = "radixfleet.io/v1alpha1"
    return [
        {"apiVersion": group, "kind": "CanaryPolicy", "metadata": {"name": "default", **meta},
         "spec": {}},
        {"apiVersion": group, "kind": "AutoscalePolicy", "metadata": {"name": ISVC, **meta},
         "spec": {"inferenceService": ISVC, "minReplicas": 0, "maxReplicas": 1}},
        {"apiVersion": group, "kind": "FailoverPolicy", "metadata": {"name": ISVC, **meta},
         "spec": {"hostedZoneId": "Z0000000RBAC", "recordName": f"{ISVC}.example.com",
                  "models": [ISVC], "regions": [{"name": "east"}, {"name": "west"}]}},
        {"apiVersion": group, "kind": "Tenant", "metadata": {"name": "rbac-team"},
         "spec": {"namespaces": [NAMESPACE], "gpuBudget": {"H100": {"guaranteed": 2}},
                  "tokenBudget": {"tokensPerMinute": 1000},
                  "apiKeys": [{"name": KEYS, "namespace": NAMESPACE}]}},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def world(kserve: Cluster) -> Cluster:
    """A serverless InferenceService under every controller's policy, a tenant with its key."""
    image = images.radixfleet()
    session.load_images(kserve, [image])
    kserve.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-k", str(REPO / "runtimes")
    )
    for name in (NAMESPACE, ACCOUNTS):
        kserve.kubectl("create", "namespace", name)
    isvc = emulated_isvc(
        image.pinned, name=ISVC, namespace=NAMESPACE, mode="Knative", min_replicas=0,
        labels={"radixfleet.io/tenant": "rbac-team"},  # a tenant's model gets a router
        # As the catalog renders a tenant's model: the quota's admission policy (installed by
        # test_admission.py) refuses any write of a GPU InferenceService without them.
        annotations={
            "radixfleet.io/canary-policy": "default",
            "radixfleet.io/gpu-type": "H100",
            "radixfleet.io/gpus-per-replica": "1",
        },
    )  # fmt: skip
    kserve.kubectl(
        "create", "secret", "generic", KEYS, "-n", NAMESPACE,
        "--from-literal=api-key=not-a-real-key",
    )  # fmt: skip
    session.apply(kserve, [*model_volume(kserve, namespace=NAMESPACE, model=ISVC), isvc])
    session.apply(kserve, _policies())
    kserve.kubectl("apply", "--server-side", "-f", str(REPO / "deploy/operator/peering.yaml"))
    return kserve


def _account(cluster: Cluster, name: str, rules: Sequence[PolicyRule], folder: Path) -> Path:
    """A ServiceAccount bound to a ClusterRole of exactly `rules`; a kubeconfig with its token."""
    role = cluster_role(name, rules, labels=OURS)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ACCOUNTS}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": ACCOUNTS}}  # fmt: skip
    # Its Secrets, in the tenant's namespace only, by name: as tenant_access renders them.
    secrets = namespace_role(name, NAMESPACE, rules, names=[dataplane.SECRET, KEYS], labels=OURS)
    secrets_binding = role_binding(name, NAMESPACE, account_namespace=ACCOUNTS, labels=OURS)
    # Its own namespace's (the accounts' here, radixfleet-system in a region): the entry's ledger.
    own = namespace_role(name, ACCOUNTS, rules, names=[ENTRY_LEDGER], labels=OURS,
                         scope=OWN_NAMESPACE)  # fmt: skip
    own_binding = role_binding(name, ACCOUNTS, account_namespace=ACCOUNTS, labels=OURS)
    session.apply(cluster, [account, role, binding, secrets, secrets_binding, own, own_binding])
    token = cluster.kubectl("create", "token", name, "-n", ACCOUNTS, "--duration=1h").stdout
    return cluster.token_kubeconfig(token.strip(), folder / f"{name}.kubeconfig")


@dataclass(frozen=True)
class Ran:
    """What a controller process did: its log, and how many reconciles it began."""

    log: str
    ticks: float


@pytest.fixture
def running(world: Cluster, tmp_path: Path) -> Iterator[Any]:
    """Start controllers as given; `finish()` lets them work for RUN_S, reads how many
    reconciles each began from its metrics port, stops them, and returns what each did."""
    started: list[tuple[str, subprocess.Popen[bytes], Path, int]] = []

    def start(name: str, args: Sequence[str], rules: Sequence[PolicyRule]) -> None:
        kubeconfig = _account(world, f"rf-{name}", rules, tmp_path)
        log, port = tmp_path / f"{name}.log", METRICS_PORT + len(started)
        process = controllers.start([*args, "--metrics-port", str(port)], kubeconfig, log)
        started.append((name, process, log, port))

    def finish(wait_s: float = RUN_S) -> dict[str, Ran]:
        time.sleep(wait_s)
        by_port = _until_each_ticked([port for _, _, _, port in started])
        ticks = {name: by_port[port] for name, _, _, port in started}
        for _, process, _, _ in started:
            process.terminate()
        for _, process, _, _ in started:
            process.wait(timeout=30)
        return {
            name: Ran(log.read_text(errors="replace"), ticks[name]) for name, _, log, _ in started
        }

    yield start, finish
    for _, process, _, _ in started:
        if process.poll() is None:
            process.kill()


def _until_each_ticked(ports: Sequence[int]) -> dict[int, float]:
    """Each port's ticks, read again until every one has begun a reconcile or FIRST_TICK_S."""
    deadline = time.monotonic() + FIRST_TICK_S
    ticks = {port: _ticks(port) for port in ports}
    while not all(ticks.values()) and time.monotonic() < deadline:
        time.sleep(1.0)
        ticks = {port: _ticks(port) for port in ports}
    return ticks


def _ticks(port: int) -> float:
    """radixfleet_controller_ticks_total summed over the controllers of one process."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return 0.0
    samples = [line.split()[-1] for line in text.splitlines()
               if line.startswith("radixfleet_controller_ticks_total")]  # fmt: skip
    return sum(float(value) for value in samples)


def _forbidden(log: str) -> list[str]:
    """The log's lines that report an RBAC refusal, but in another tenant namespace: the
    controllers watch the whole shared test cluster, and a namespace other modules left there
    has no Role for these accounts, as a namespace whose tenant access is not rendered has none
    in a region."""
    elsewhere = re.compile(r'in the namespace "(?!' + re.escape(NAMESPACE) + r'")[^"]+"')
    return [
        line
        for line in log.splitlines()
        if (("forbidden: User" in line and " cannot " in line) or "APIForbiddenError" in line)
        and not (elsewhere.search(line) and _tenant_namespace_elsewhere(line))
    ]


def _tenant_namespace_elsewhere(line: str) -> bool:
    """Whether the refusal is of a Role held in a tenant namespace (Secrets, the routers'
    Deployments and Services, pods' labels): those are granted per namespace."""
    return any(f'resource "{r}"' in line for r in ("secrets", "deployments", "services", "pods"))


# Each controller's own command (all without peering: they would elect one leader among them).
ARGS = {
    "canary": ["canary", "run", "--standalone"],
    "autoscale": ["autoscale", "run", "--standalone"],
    "quota": ["quota", "run", "--standalone", "--region", "rbac-test"],
    "failover": ["failover", "run", "--standalone"],
    # It applies the model's router (whose pod cannot start here: no such image; the RBAC of
    # applying it is what is tested).
    "routers": ["routers", "run", "--standalone", "--router-image", "rbac-test/smg:none"],
    # It lists the LoRA models' pods; with no per-adapter demand source its passes halt.
    "lora": ["lora", "run", "--standalone"],
}


def test_each_controller_under_its_own_rendered_role_is_never_forbidden(
    world: Cluster, running: Any
) -> None:
    start, finish = running
    assert set(ARGS) == set(PLUGINS), "a registered controller this test does not run"
    for name, plugin in PLUGINS.items():
        start(name, ARGS[name], operator_rules([plugin]))
    # The routers controller's work: the model's revision gets its router. They run until it
    # has: a full run on a busy machine found none when it stopped them after 27 s, the model's
    # InferenceService still changing (the revision's making, most likely) a second before.
    router_name = f"{ISVC}-predictor-00001-router"

    def routed() -> bool:
        found = world.kubectl("get", "deployment", router_name, "-n", NAMESPACE, check=False)
        return found.returncode == 0

    session.wait_for(routed, timeout_s=ROUTER_TIMEOUT_S, what=f"router {NAMESPACE}/{router_name}")
    for name, did in finish().items():
        assert not _forbidden(did.log), f"{name} was refused:\n" + "\n".join(_forbidden(did.log))
        assert did.ticks > 0, f"{name} never reconciled anything:\n{did.log[-2000:]}"
    # The quota controller's work is visible: the tenant's GPU budget as a ResourceQuota.
    quota = get(world, "resourcequota", "radixfleet-gpus", "-n", NAMESPACE)
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"
    router = get(world, "deployment", router_name, "-n", NAMESPACE)
    assert router["metadata"]["ownerReferences"][0]["kind"] == "Revision"


def test_the_operator_under_the_union_with_peering_is_never_forbidden(
    world: Cluster, running: Any
) -> None:
    """The deployed shape: one process, every controller (the failover opted in), kopf's peering
    object for leader election, one role: the one infra and deploy/operator render."""
    start, finish = running
    args = ["operator", "run", "--with-failover", "--liveness-port", str(METRICS_PORT - 2),
            "--readiness-port", str(METRICS_PORT - 1)]  # fmt: skip
    start("operator", args, operator_rules())
    time.sleep(RUN_S)
    _until_each_ticked([METRICS_PORT])  # up and reconciling, however slowly it started
    # Read while it runs: a cleanly stopped operator takes its entry out of the peering status.
    peers = get(world, "clusterkopfpeering", "radixfleet").get("status") or {}
    (did,) = finish(wait_s=0).values()
    assert not _forbidden(did.log), "the operator was refused:\n" + "\n".join(_forbidden(did.log))
    assert did.ticks > 0, f"the operator never reconciled anything:\n{did.log[-2000:]}"
    assert len(peers) == 1, f"the operator is not a peer: {peers}\n{did.log[-2000:]}"


def test_a_role_missing_one_rule_is_refused_and_the_harness_sees_it(
    world: Cluster, running: Any
) -> None:
    """Control: the quota controller without the right to create a ResourceQuota."""
    start, finish = running
    world.kubectl("delete", "resourcequota", "radixfleet-gpus", "-n", NAMESPACE,
                  "--ignore-not-found")  # fmt: skip
    rules = operator_rules([PLUGINS["quota"]])
    kept = _without(rules, "", "resourcequotas", "create")
    assert _count(kept) == _count(rules) - 1
    start("quota-without-create", ARGS["quota"], kept)
    (did,) = finish().values()
    refused = _forbidden(did.log)
    assert refused, f"no Forbidden seen:\n{did.log[-3000:]}"
    assert any("resourcequotas" in line for line in refused), refused


def _count(rules: Sequence[PolicyRule]) -> int:
    return len({t for r in rules for t in r.triples()})


def _without(rules: Sequence[PolicyRule], group: str, resource: str, verb: str) -> list[PolicyRule]:
    """`rules` less one permission."""
    return [
        PolicyRule(api_groups=(g,), resources=(res,), verbs=(v,))
        for r in rules
        for g, res, v in sorted(r.triples())
        if (g, res, v) != (group, resource, verb)
    ]


# (verb, resource, namespace, allowed): Secrets only in the tenant's namespace, reads only of the
# ones named there (the data plane's key, the tenant's API keys), never a list.
SECRET_ACCESS = [
    ("get", f"secret/{dataplane.SECRET}", NAMESPACE, True),
    ("get", f"secret/{KEYS}", NAMESPACE, True),
    ("get", "secret/a-workloads-own-secret", NAMESPACE, False),
    ("list", "secrets", NAMESPACE, False),
    ("watch", "secrets", NAMESPACE, False),
    ("get", f"secret/{dataplane.SECRET}", ACCOUNTS, False),
    ("get", "secret/radixfleet-fleet-token", "radixfleet-system", False),
    ("get", "secret/bootstrap-token-abcdef", "kube-system", False),
    ("create", "secrets", "kube-system", False),
]


@pytest.mark.parametrize(
    ("account", "creates"),
    [pytest.param("operator", True, id="operator"), pytest.param("entry", False, id="entry")],
)
def test_an_account_reads_only_the_secrets_it_is_told_of_and_only_in_tenant_namespaces(
    world: Cluster, tmp_path: Path, account: str, creates: bool
) -> None:
    """The API server's own answer (`kubectl auth can-i` as the ServiceAccount) for the operator's
    and the entry's rendered rules: their ClusterRoles hold no Secret at all."""
    rules = operator_rules() if account == "operator" else entry_base.entry_rules()
    name = f"rf-{account}-secrets"
    _account(world, name, rules, tmp_path)
    cases = [*SECRET_ACCESS, ("create", "secrets", NAMESPACE, creates)]
    wrong = _wrong_answers(world, name, cases)
    assert not wrong, f"{account}: (verb, resource, namespace, allowed) -> can-i said: {wrong}"


# (verb, resource, namespace, allowed): the operator writes Kubernetes' workloads (the routers'
# Deployments and Services, pods' pool labels) and the serving objects (a revision's scale
# bounds, on it and its PodAutoscaler; a model's canary traffic) only in tenant namespaces, and
# reads them anywhere.
WORKLOAD_WRITES = [
    ("create", "deployments", NAMESPACE, True),
    ("patch", "deployments", NAMESPACE, True),
    ("create", "services", NAMESPACE, True),
    ("patch", "pods", NAMESPACE, True),
    ("list", "deployments", "kube-system", True),
    ("create", "deployments", "kube-system", False),
    ("patch", "deployments", ACCOUNTS, False),
    ("create", "services", "kube-system", False),
    ("patch", "pods", "kube-system", False),
    ("delete", "deployments", NAMESPACE, False),
    ("patch", "revisions.serving.knative.dev", NAMESPACE, True),
    ("patch", "podautoscalers.autoscaling.internal.knative.dev", NAMESPACE, True),
    ("patch", "inferenceservices.serving.kserve.io", NAMESPACE, True),
    ("get", "revisions.serving.knative.dev", "kube-system", True),
    ("patch", "revisions.serving.knative.dev", "kube-system", False),
    ("patch", "podautoscalers.autoscaling.internal.knative.dev", ACCOUNTS, False),
    ("patch", "inferenceservices.serving.kserve.io", "kube-system", False),
]


def test_the_operator_writes_workloads_only_in_tenant_namespaces(
    world: Cluster, tmp_path: Path
) -> None:
    """Before, its ClusterRole created and patched Deployments, Services and pods, and patched
    revisions, PodAutoscalers and InferenceServices, in every namespace: a leaked token could run
    a pod in `kube-system`, or scale or shift any model in the cluster."""
    name = "rf-operator-workloads"
    _account(world, name, operator_rules(), tmp_path)
    wrong = _wrong_answers(world, name, WORKLOAD_WRITES)
    assert not wrong, f"(verb, resource, namespace, allowed) -> can-i said: {wrong}"


def test_the_entry_reads_and_patches_only_its_ledger_in_its_own_namespace(
    world: Cluster, tmp_path: Path
) -> None:
    """The ConfigMap the entry's replicas keep their debts in, and no other
    (radixfleet/controllers/quota/ carry.py): rendered with the entry, so it may not create one, nor
    list them."""
    name = "rf-entry-ledger"
    _account(world, name, entry_base.entry_rules(), tmp_path)
    cases = [
        ("get", f"configmap/{ENTRY_LEDGER}", ACCOUNTS, True),
        ("patch", f"configmap/{ENTRY_LEDGER}", ACCOUNTS, True),
        ("delete", f"configmap/{ENTRY_LEDGER}", ACCOUNTS, False),
        ("get", "configmap/another", ACCOUNTS, False),
        ("list", "configmaps", ACCOUNTS, False),
        ("create", "configmaps", ACCOUNTS, False),
        ("get", f"configmap/{ENTRY_LEDGER}", NAMESPACE, False),
    ]
    wrong = _wrong_answers(world, name, cases)
    assert not wrong, f"(verb, resource, namespace, allowed) -> can-i said: {wrong}"


def _wrong_answers(
    cluster: Cluster, account: str, cases: Sequence[tuple[str, str, str, bool]]
) -> dict[tuple[str, str, str, bool], str]:
    """The cases (verb, resource, namespace, allowed) the API server answers otherwise for
    the ServiceAccount `account` of ACCOUNTS, with what it said."""
    user = f"system:serviceaccount:{ACCOUNTS}:{account}"
    answers = {case: _can_i(cluster, user, *case[:3]) for case in cases}
    return {case: said for case, said in answers.items() if (said == "yes") != case[3]}


def _can_i(cluster: Cluster, user: str, verb: str, resource: str, namespace: str) -> str:
    """The API server's "yes" or "no" to `user` doing `verb` on `resource` in `namespace`."""
    said = cluster.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={user}",
                           check=False)  # fmt: skip
    return said.stdout.strip()
