"""The in-cluster data plane, deployed from radixfleet's bases as a platform team deploys it:
the operator (`deploy/operator/`, whose routers controller gives every serving revision an smg
router), the region entry (`deploy/entry/`, two replicas behind one Service), and two tenants
that each own a serverless model called `chat` (emulated SGLang predictors from radixfleet's
image, scaled to zero when idle).

What is proven, through the entry's Service as a client reaches it: a streamed answer from the
caller's own `chat` (the same name resolves per tenant), served through that revision's router,
whose smg found the predictor pod by Kubernetes discovery on its queue-proxy port; 401 for a
wrong or missing key; 429 for a tenant over its token budget while the other is served; and a
model at zero woken by a request through the entry, answered, with none lost. Behind the entry
only the data plane's key opens anything: the operator created it in each tenant namespace (no
one else did here), and a tenant's own key, or none, gets 401 from the router and the predictor.
The cluster's Prometheus runs beside them (`deploy/monitoring/`'s PodMonitors), the canary's
judge in the baseline's test at the end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from radixfleet import dataplane, labels
from radixfleet.controllers.autoscale.knative import scale_annotations
from radixfleet.controllers.autoscale.kube import (
    HttpWarmUp,
    KubeDataPlaneKeys,
    KubePods,
    KubeRevisions,
)
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import Observed, ReplicaMetrics
from radixfleet.controllers.autoscale.warming import WARMED, Warmer
from radixfleet.controllers.quota.carry import Owed
from radixfleet.controllers.routers.spec import ROUTES_FOR
from radixfleet.kit.operator import METRICS_PORT
from radixfleet.platform import ENTRY_LEDGER
from radixfleet.render import data_plane_guard, operator
from radixfleet.render import entry as entry_base
from radixfleet.render.inferenceservices import build_network_policies
from radixfleet.workload.records import RequestResult, WorkItem
from radixfleet.workload.replay import Replayer
from testbed import images, netpol, prometheus, session
from testbed.cluster import Cluster, ClusterError, is_ready
from testbed.deploy import OPERATOR_SELECTOR, apply_pod_monitors, entry_url, platform
from testbed.emulated import ROUTER_TOKENIZER, emulated_isvc, get, model_volume, ready
from testbed.tenants import TenantSpec, offboard, onboard
from tests.openai_conformance import CHECKS, Endpoint

MODEL = "chat"
REVISION = f"{MODEL}-predictor-00001"
ROUTER = f"{REVISION}-router"
TIMEOUT_S = 300.0
# The revision scales to zero about 6 s + Knative's 30 s grace period after its last request.
FAST_SCALE_DOWN = {"autoscaling.knative.dev/window": "6s"}


RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


@dataclass(frozen=True)
class Team:
    name: str
    key: str
    tokens_per_minute: int
    scale_down: dict[str, str]
    gpus: int = 2  # its guaranteed H100s

    @property
    def namespace(self) -> str:
        return f"dp-{self.name}"

    @property
    def tenant(self) -> TenantSpec:
        """The team as onboarded, its namespace enforcing Pod Security `restricted` where the
        catalog enforces `baseline`: every pod here (a predictor reading its model from a
        volume, its queue-proxy, the router) must pass `restricted` to run. Only KServe's
        storage-initializer, which these predictors do not run (their weights are on a claim),
        keeps the rendered namespaces at `baseline`."""
        return TenantSpec(
            self.name, namespace=self.namespace, key=self.key, gpus=self.gpus,
            tokens_per_minute=self.tokens_per_minute, namespace_labels=RESTRICTED,
        )  # fmt: skip


BLUE = Team("blue", "sk-blue-7f3a", 6_000_000, FAST_SCALE_DOWN)
# 600 tokens a minute: each of the two entry replicas holds 300, a bucket of 25 tokens (5 s of
# budget), about one short chat at a time.
GREEN = Team("green", "sk-green-51c9", 600, {})
TEAMS = (BLUE, GREEN)


def _model(image: str, team: Team) -> dict[str, Any]:
    return emulated_isvc(
        image, name=MODEL, namespace=team.namespace, mode="Knative", min_replicas=0,
        labels={"radixfleet.io/tenant": team.name},
        annotations={"radixfleet.io/gpu-type": "H100", "radixfleet.io/gpus-per-replica": "1",
                     **team.scale_down},
    )  # fmt: skip


def _onboard(cluster: Cluster, team: Team, image: str, model: dict[str, Any] | None = None) -> None:
    """What a platform team applies for a tenant (testbed/tenants.py), then its model (`chat`
    from `image` unless another is given)."""
    onboard(cluster, team.tenant)
    # No data-plane key from the test bed: the operator must create it.
    volume = model_volume(cluster, namespace=team.namespace, model=MODEL, data_plane_key=False)
    session.apply(cluster, [*volume, model or _model(image, team)])


@pytest.fixture(scope="module")
def plane(
    kserve: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, str]]:
    """The operator, the entry and two tenants' models, Ready; the entry's URL."""
    with platform(kserve, tmp_path_factory.mktemp("overlays")) as image, _guarded(kserve):
        try:
            for team in TEAMS:
                _onboard(kserve, team, image.pinned)
            for team in TEAMS:
                _wait_ready(kserve, team)
            yield kserve, entry_url(kserve)
        finally:
            for team in TEAMS:
                offboard(kserve, team.tenant)


@contextlib.contextmanager
def _guarded(cluster: Cluster) -> Iterator[None]:
    """The platform's Prometheus reading the data plane (the canary's judge in the baseline's
    test below), and the data plane made under the guard for the block: its routers and
    predictors come through the chain of controllers it admits
    (radixfleet/render/data_plane_guard.py)."""
    apply_pod_monitors(cluster)
    session.apply(cluster, data_plane_guard.manifests())
    try:
        yield
    finally:
        for obj in data_plane_guard.manifests():
            cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--wait=false",
                            check=False)  # fmt: skip


def _wait_ready(cluster: Cluster, team: Team) -> None:
    session.wait_for(lambda: ready(cluster, "isvc", MODEL, team.namespace), timeout_s=TIMEOUT_S,
                     what=f"{team.namespace}/{MODEL} Ready")  # fmt: skip


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def tokens(self) -> list[str]:
        """The content pieces of a streamed chat answer (which must end with [DONE])."""
        events = [e for e in self.body.splitlines() if e.startswith("data: ")]
        assert events and events[-1] == "data: [DONE]", self.body[:500]
        chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
        return [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]


def _chat(
    url: str,
    key: str | None,
    *,
    model: str = MODEL,
    timeout_s: float = 240,
    max_tokens: int = 8,
    **extra: Any,
) -> Answer:
    """A streamed chat; `extra` adds to its body."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "Say hello."}], **extra}  # fmt: skip
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url}/v1/chat/completions",
                                     data=json.dumps(body).encode(), headers=headers)  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return Answer(response.status, dict(response.headers), response.read().decode())
    except urllib.error.HTTPError as error:
        return Answer(error.code, dict(error.headers), error.read().decode())


def _router_workers(cluster: Cluster, namespace: str, router: str = ROUTER) -> list[str]:
    """The worker URLs the revision's router lists ([] before its pod is up)."""
    found = cluster.kubectl("get", "service", router, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return []
    ip = json.loads(found.stdout)["spec"]["clusterIP"]
    request = urllib.request.Request(
        f"http://{ip}:8000/workers", headers=dataplane.bearer(_data_plane_key(cluster, namespace))
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            workers = json.loads(response.read())["workers"]
    except OSError:
        return []
    return [w["url"] for w in workers if w.get("is_healthy")]


def _data_plane_key(cluster: Cluster, namespace: str) -> str:
    secret = get(cluster, "secret", dataplane.SECRET, "-n", namespace)
    return base64.b64decode(secret["data"][dataplane.KEY]).decode()


def _call(url: str, headers: dict[str, str]) -> int:
    """The status of a short completion sent straight to `url` (past the entry)."""
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
    headers = {"Content-Type": "application/json", **headers}
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _call_awake(cluster: Cluster, url: str, base: str, headers: dict[str, str]) -> int:
    """`_call`, asked again while it answers 503: blue scales to zero some 36 s after its last
    request, and a router with no worker answers 503 until a chat through the entry (`url`)
    wakes the revision and the router lists its pod again. Any other status is the answer."""
    for _ in range(3):
        status = _call(base, headers)
        if status != 503:
            return status
        _served_by_router(cluster, url, BLUE)
    return _call(base, headers)


def _predictor_pods(
    cluster: Cluster, namespace: str, *, terminating: bool = False
) -> list[dict[str, Any]]:
    found = get(cluster, "pods", "-n", namespace, "-l", f"serving.knative.dev/revision={REVISION}")
    items: list[dict[str, Any]] = found["items"]
    return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]


def _served_by_router(cluster: Cluster, url: str, team: Team) -> Answer:
    """A chat once the router has found the revision's pod (the first may wake it)."""
    _chat(url, team.key)
    _wait_router(cluster, team.namespace)

    def listed() -> bool:
        if _router_workers(cluster, team.namespace):
            return True
        # Blue scales down after 6 s idle: on a busy machine its pod may be gone before the
        # router has seen it, and a router with no worker waits for one forever. A chat
        # through the entry brings the revision back (Knative's activator), so keep asking.
        _chat(url, team.key)
        return False

    session.wait_for(listed, timeout_s=TIMEOUT_S,
                     what=f"the router of {team.namespace}/{REVISION} lists a worker")  # fmt: skip
    return _chat(url, team.key)


def _wait_router(cluster: Cluster, namespace: str) -> None:
    """Wait for the routers controller to create the revision's router, and for it to roll out
    (failing with the operator's logs, where a missing router is explained)."""

    def exists() -> bool:
        found = cluster.kubectl("get", "deployment", ROUTER, "-n", namespace, check=False)
        return found.returncode == 0

    try:
        session.wait_for(exists, timeout_s=TIMEOUT_S, what=f"router {namespace}/{ROUTER}")
    except ClusterError as error:
        logs = cluster.kubectl("logs", "-n", operator.NAMESPACE, "-l", OPERATOR_SELECTOR,
                               "--tail=40", check=False)  # fmt: skip
        raise ClusterError(f"{error}\n--- operator logs\n{logs.stdout}{logs.stderr}") from error
    session.wait_rollout(cluster, namespace=namespace, deployment=ROUTER)


def test_each_serving_revision_gets_a_router_owned_by_the_revision(
    plane: tuple[Cluster, str],
) -> None:
    cluster, _ = plane
    for team in TEAMS:
        _wait_router(cluster, team.namespace)
        router = get(cluster, "deployment", ROUTER, "-n", team.namespace)
        revision = get(cluster, "revision", REVISION, "-n", team.namespace)
        (owner,) = router["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Revision", REVISION)
        assert owner["uid"] == revision["metadata"]["uid"]
        pod_spec = router["spec"]["template"]["spec"]
        assert pod_spec["serviceAccountName"] == "radixfleet-router"
        assert pod_spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_router_discovers_the_predictor_pod_on_its_queue_proxy_port(
    plane: tuple[Cluster, str],
) -> None:
    cluster, url = plane
    _served_by_router(cluster, url, BLUE)
    pod_ips = {p["status"].get("podIP") for p in _predictor_pods(cluster, BLUE.namespace)}
    assert _router_workers(cluster, BLUE.namespace) == [f"http://{ip}:8012" for ip in pod_ips]


def test_a_streamed_answer_comes_from_the_callers_own_model_through_its_router(
    plane: tuple[Cluster, str],
) -> None:
    cluster, url = plane
    for team in TEAMS:
        answer = _served_by_router(cluster, url, team)
        assert answer.status == 200, answer.body
        assert sum(1 for t in answer.tokens() if t) >= 1
        assert answer.headers["x-radixfleet-revision"] == f"{team.namespace}/{REVISION}"
        assert answer.headers["x-radixfleet-path"] == "router"


def test_prompts_are_charged_as_the_models_tokenizer_at_its_router_counts_them(
    plane: tuple[Cluster, str],
) -> None:
    """Blue's router loads the tokenizer its model names (the emulated replica's, in the test
    bed's router image), and the entry counts every prompt with it, never the byte bound."""
    cluster, url = plane
    _served_by_router(cluster, url, BLUE)
    ip = get(cluster, "service", ROUTER, "-n", BLUE.namespace)["spec"]["clusterIP"]
    listed = urllib.request.Request(
        f"http://{ip}:8000/v1/tokenizers",
        headers=dataplane.bearer(_data_plane_key(cluster, BLUE.namespace)),
    )
    with urllib.request.urlopen(listed, timeout=10) as answer:
        names = [t["name"] for t in json.loads(answer.read())["tokenizers"]]
    assert names == [ROUTER_TOKENIZER]
    entry = f"http://{_ready_pod_ip(cluster, operator.NAMESPACE, ENTRY_PODS)}"

    def counting() -> bool:
        # An earlier test may have replaced the router: the entry asks again a second after a
        # router failed to answer, and charges the byte bound meanwhile.
        before = _prompt_counts(entry).get("tokenizer", 0)
        assert _chat(f"{entry}:{entry_base.PORT}", BLUE.key).status == 200
        return _prompt_counts(entry).get("tokenizer", 0) > before

    session.wait_for(counting, timeout_s=60, what="the entry pod counting at blue's router")
    before = _prompt_counts(entry)
    for _ in range(3):
        assert _chat(f"{entry}:{entry_base.PORT}", BLUE.key).status == 200
    after = _prompt_counts(entry)
    assert after.get("tokenizer", 0) - before.get("tokenizer", 0) == 3, (before, after)
    assert after.get("bytes", 0) == before.get("bytes", 0), (before, after)


def _prompt_counts(entry: str) -> dict[str, float]:
    """An entry pod's `radixfleet_prompt_counts_total` for blue's model, by how it counted."""
    with urllib.request.urlopen(f"{entry}:{entry_base.METRICS_PORT}/metrics", timeout=10) as m:
        text = m.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "radixfleet_prompt_counts_total"
                and sample.labels.get("model_name") == MODEL
            ):
                by = sample.labels["by"]
                found[by] = found.get(by, 0.0) + sample.value
    return found


@pytest.mark.parametrize("key", [None, "sk-not-a-key"], ids=["no-key", "wrong-key"])
def test_a_request_without_a_tenants_key_gets_401(
    plane: tuple[Cluster, str], key: str | None
) -> None:
    _, url = plane
    answer = _chat(url, key)
    assert answer.status == 401
    assert json.loads(answer.body)["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_the_openai_sdk_is_served_as_by_openai(
    plane: tuple[Cluster, str], check: Callable[[Endpoint], None]
) -> None:
    """The conformance checks of tests/openai_conformance.py, through the deployed entry."""
    _, url = plane
    check(Endpoint(f"{url}/v1", BLUE.key, MODEL))


def test_the_operator_made_each_namespaces_data_plane_key_and_only_it_opens_router_and_model(
    plane: tuple[Cluster, str],
) -> None:
    cluster, url = plane
    _served_by_router(cluster, url, BLUE)
    secret = get(cluster, "secret", dataplane.SECRET, "-n", BLUE.namespace)
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "radixfleet"
    key = _data_plane_key(cluster, BLUE.namespace)
    assert key != _data_plane_key(cluster, GREEN.namespace), "one key per namespace"
    router = get(cluster, "service", ROUTER, "-n", BLUE.namespace)["spec"]["clusterIP"]
    predictor = get(cluster, "service", REVISION, "-n", BLUE.namespace)["spec"]["clusterIP"]
    knative = {"Knative-Serving-Revision": REVISION, "Knative-Serving-Namespace": BLUE.namespace}
    places = [
        ("router", f"http://{router}:8000", {}),
        ("predictor", f"http://{predictor}", knative),
    ]
    callers = [("nobody", {}), ("tenant", dataplane.bearer(BLUE.key)),
               ("data plane", dataplane.bearer(key))]  # fmt: skip
    statuses = {
        (where, who): _call_awake(cluster, url, base, {**extra, **credentials})
        for where, base, extra in places
        for who, credentials in callers
    }
    assert statuses == {
        ("router", "nobody"): 401, ("router", "tenant"): 401, ("router", "data plane"): 200,
        ("predictor", "nobody"): 401, ("predictor", "tenant"): 401,
        ("predictor", "data plane"): 200,
    }  # fmt: skip


# A person of the tenant's, bound to Kubernetes' own `edit` in its namespace: may make pods,
# Deployments and Knative Services there, and read none of the namespace's Secrets.
TENANT_USER = "alice@blue"


def _as_tenant(cluster: Cluster, *args: str, stdin: str | None = None) -> tuple[int, str]:
    """`kubectl ARGS` as the tenant's person, dry-run on the server (admission runs, nothing is
    kept); the exit status and what it said."""
    done = cluster.kubectl(*args, f"--as={TENANT_USER}", "--dry-run=server", "-n",
                           BLUE.namespace, check=False, stdin=stdin)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _tenant_pod(name: str, pod_labels: dict[str, str], env: list[Any] | None = None) -> Any:
    """A tenant's own pod (as `_workload`, Pod Security `restricted`) with these labels and
    environment."""
    pod = _workload(BLUE.namespace, images.radixfleet().pinned)
    pod["metadata"] = {"name": name, "labels": pod_labels}
    pod["spec"]["containers"][0]["env"] = env or []
    return pod


def test_a_tenants_own_pod_cannot_pass_for_the_data_plane(plane: tuple[Cluster, str]) -> None:
    """The guard under the real API server, with the data plane made under it (this module's
    routers and predictors came through the chain it admits): a tenant's person, with `edit` in
    its namespace, is refused a pod labelled as a router or a predictor, a pod that mounts the
    data plane's key, a Deployment of such pods, and a new image for the router's Deployment,
    each with the guard's reason; its own plain pod and a scale of the router are admitted."""
    cluster, _ = plane
    cluster.kubectl("create", "rolebinding", "tenant-edit", "--clusterrole=edit",
                    f"--user={TENANT_USER}", "-n", BLUE.namespace)  # fmt: skip
    may = ("auth", "can-i", "create", "pods", f"--as={TENANT_USER}", "-n", BLUE.namespace)
    session.wait_for(lambda: cluster.kubectl(*may, check=False).returncode == 0, timeout_s=60,
                     what="the tenant's person bound to edit")  # fmt: skip
    try:
        key = [{"name": "K", "valueFrom": {"secretKeyRef": {
            "name": dataplane.SECRET, "key": dataplane.KEY}}}]  # fmt: skip
        router_labels = {labels.COMPONENT: labels.ROUTER_COMPONENT}
        predictor_labels = {data_plane_guard.PREDICTOR_LABEL: MODEL}
        routers = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mine"},
                   "spec": {"selector": {"matchLabels": router_labels},
                            "template": {k: v for k, v in _tenant_pod("x", router_labels).items()
                                         if k in ("metadata", "spec")}}}  # fmt: skip
        create = ("create", "-f", "-")
        tries: dict[str, tuple[tuple[str, ...], Any]] = {
            "plain pod": (create, _tenant_pod("mine", {"app": "mine"})),
            "router-labelled pod": (create, _tenant_pod("r", router_labels)),
            "predictor-labelled pod": (create, _tenant_pod("p", predictor_labels)),
            "pod with the key": (create, _tenant_pod("k", {"app": "mine"}, key)),
            "Deployment of routers": (create, routers),
            "router's new image": (("set", "image", f"deployment/{ROUTER}", "*=evil:1"), None),
            "router scaled": (("scale", f"deployment/{ROUTER}", "--replicas=2"), None),
        }
        outcomes = {
            name: _as_tenant(cluster, *args, stdin=None if obj is None else json.dumps(obj))
            for name, (args, obj) in tries.items()
        }
    finally:
        cluster.kubectl("delete", "rolebinding", "tenant-edit", "-n", BLUE.namespace, check=False)
    admitted = {name for name, (status, _) in outcomes.items() if status == 0}
    assert admitted == {"plain pod", "router scaled"}, outcomes
    for name, (_, said) in outcomes.items():
        if name not in admitted:
            assert "data-plane-guard" in said and f"{TENANT_USER} may not make" in said, said


# ---- one tenant's streams cannot stall another's: fair shares of the entry's connections -----

# The entry pod's upstream connections for this test (512 by default): one tenant's 130 long
# streams once filled the entry's pool of 100 and made the others wait 24.4 s for a first token.
POOL = 8
LONG_STREAM = {"model": MODEL, "text": "Tell the fleet a long story.", "stream": True,
               "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}}  # fmt: skip


def _set_entry_pool(cluster: Cluster, pool: int | None) -> None:
    """The entry's `--upstream-connections` set to `pool` (None: its default), rolled out."""
    deployment = get(cluster, "deployment", entry_base.NAME, "-n", operator.NAMESPACE)
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    if "--upstream-connections" in args:
        at = args.index("--upstream-connections")
        args = args[:at] + args[at + 2 :]
    args = [*args, *(["--upstream-connections", str(pool)] if pool else [])]
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
    cluster.kubectl("patch", "deployment", entry_base.NAME, "-n", operator.NAMESPACE,
                    "--type=json", "-p", json.dumps(patch))  # fmt: skip
    session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)


def _served(url: str, team: Team, *, within_s: float) -> list[Answer]:
    """The team's chat, asked again while it is refused for its token budget (not for a share
    of connections); every answer."""
    answers = [_chat(url, team.key, timeout_s=within_s)]
    deadline = time.monotonic() + within_s
    while answers[-1].status == 429 and "concurrency" not in answers[-1].body:
        if time.monotonic() > deadline:
            break
        time.sleep(int(answers[-1].headers.get("Retry-After", "2")))
        answers.append(_chat(url, team.key, timeout_s=within_s))
    return answers


async def _streams_held_while(entry: str, ask: Callable[[], Any]) -> tuple[list[str], Any]:
    """POOL long streams of blue's opened at the entry pod and held open (each read to its first
    event, then left unread) while `ask` runs in a thread; how each was answered ("200" or the
    refusal's code), and what `ask` returned."""
    headers = {"Authorization": f"Bearer {BLUE.key}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as client:
        posts = (client.post(f"{entry}/generate", json=LONG_STREAM, headers=headers)
                 for _ in range(POOL))  # fmt: skip
        opened = await asyncio.gather(*posts)
        try:
            answered = []
            for response in opened:
                if response.status == 200:
                    await response.content.readany()
                    answered.append("200")
                else:
                    answered.append(str((await response.json())["error"]["code"]))
            return answered, await asyncio.to_thread(ask)
        finally:
            for response in opened:
                response.close()  # the entry cancels them upstream


def test_a_tenants_streams_past_its_share_cannot_stall_another_tenant(
    plane: tuple[Cluster, str],
) -> None:
    """With the entry pod's pool at 8 connections, blue opens 8 long streams on it and holds
    them: it gets its share (8 over the tenants with keys) and the rest are refused at once
    (429 `concurrency_limit_exceeded`), so green, asking meanwhile, is served (waking its model
    if it is at zero); once blue lets go, blue is served again."""
    cluster, _ = plane
    _set_entry_pool(cluster, POOL)
    try:
        entry = f"http://{_ready_pod_ip(cluster, operator.NAMESPACE, ENTRY_PODS)}:{entry_base.PORT}"
        started = time.monotonic()
        streams, green = asyncio.run(_streams_held_while(
            entry, lambda: _served(entry, GREEN, within_s=TIMEOUT_S)))  # fmt: skip
        green_s = time.monotonic() - started
        # Its streams' shares come back as the entry sees them closed, within moments.
        session.wait_for(lambda: _chat(entry, BLUE.key).status == 200, timeout_s=60,
                         what="blue served again once its streams are closed")  # fmt: skip
    finally:
        _set_entry_pool(cluster, None)
    admitted, refused = streams.count("200"), [s for s in streams if s != "200"]
    print(f"blue's {POOL} streams on a pool of {POOL}: {admitted} admitted, refused {refused}; "
          f"green answered {[a.status for a in green]} in {green_s:.1f} s")  # fmt: skip
    assert 1 <= admitted <= POOL // 2, streams
    assert refused == ["concurrency_limit_exceeded"] * (POOL - admitted), streams
    assert green[-1].status == 200 and any(green[-1].tokens()), green[-1].body[:300]
    assert all("concurrency" not in a.body for a in green), [a.body[:200] for a in green]


def test_a_tenant_over_its_token_budget_gets_429_while_another_is_served(
    plane: tuple[Cluster, str],
) -> None:
    _, url = plane
    statuses = []
    for _ in range(20):
        statuses.append(_chat(url, GREEN.key).status)
        if statuses[-1] == 429:
            break
    assert statuses[-1] == 429 and set(statuses) <= {200, 429}, statuses
    assert _chat(url, BLUE.key).status == 200


# Four bodies of 60 MB at once took an entry from 285 to 616 MiB (its limit: 512 MiB) when its
# gate read and parsed every body before anything else; an OOM kill cuts every tenant's streams.
HUGE_BYTES, UNDER_THE_BOUND_BYTES, ATTACKERS = 60 * 1000**2, 8 * 1024**2, 4
PEAK_MARGIN_BYTES = 64 * 1024**2


def _send_whole(ip: str, *, key: str, length: int) -> int:
    """The status an entry pod answers a completion whose `length` bytes of body the client
    sends whole, as fast as the entry takes them (0: no answer)."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: entry\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n")  # fmt: skip
    chunk = b"x" * 2**20
    with socket.create_connection((ip, entry_base.PORT), timeout=30) as conn:
        conn.sendall(head.encode())
        with contextlib.suppress(OSError):  # refused at once, the rest of it is not taken
            for start in range(0, length, len(chunk)):
                conn.sendall(chunk[: length - start])
        with contextlib.suppress(OSError), conn.makefile("rb") as answer:
            line = answer.readline()
            return int(line.split()[1]) if line else 0
    return 0


def test_huge_bodies_cost_the_deployed_entry_almost_nothing(plane: tuple[Cluster, str]) -> None:
    """Four 60 MB bodies of a tenant's and four of 8 MB under a key nobody has, sent whole and
    at once to one entry pod: refused by their length (413) and by their key (401) before the
    entry reads them; the pod's memory peak (its cgroup's, what its limit and the OOM killer
    judge) stays within 64 MiB of where it was, and it serves on."""
    cluster, _ = plane
    # A ready pod, not the first listed: another test may have rolled the entry out (the stall
    # test does, twice), and a full run once picked a pod still terminating (connection refused).
    session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)
    pod = _ready_pod(cluster, operator.NAMESPACE, ENTRY_PODS)
    assert pod is not None, "no ready entry pod after its rollout"
    ip, memory = pod["status"]["podIP"], cluster.pod_memory_cgroup(pod["metadata"]["uid"])
    before = int((memory / "memory.usage_in_bytes").read_text())
    (memory / "memory.max_usage_in_bytes").write_text("0")  # the peak, from now on
    asks = [(BLUE.key, HUGE_BYTES)] * ATTACKERS + [("sk-nobody", UNDER_THE_BOUND_BYTES)] * ATTACKERS
    with ThreadPoolExecutor(len(asks)) as pool:
        statuses = list(pool.map(lambda ask: _send_whole(ip, key=ask[0], length=ask[1]), asks))
    peak = int((memory / "memory.max_usage_in_bytes").read_text())
    print(f"entry pod under {len(asks)} huge bodies: memory {before / 2**20:.0f} MiB, peak "
          f"{peak / 2**20:.0f} MiB; answers {statuses}")  # fmt: skip
    assert statuses == [413] * ATTACKERS + [401] * ATTACKERS
    assert peak - before < PEAK_MARGIN_BYTES, (before, peak)
    assert _chat(f"http://{ip}:{entry_base.PORT}", BLUE.key).status == 200


def test_radixfleets_namespace_runs_only_restricted_pods(plane: tuple[Cluster, str]) -> None:
    """Pod Security `restricted` is enforced there (deploy/operator/): the operator's and the
    entry's pods run under it, and a pod with root and a host folder (the nodes' model-cache
    folder keeper's kind, which runs in KServe's namespace instead) is refused."""
    cluster, _ = plane
    for name in (operator.NAME, entry_base.NAME):
        session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=name)
    rooted = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "rooted", "namespace": operator.NAMESPACE},
              "spec": {"containers": [{"name": "c", "image": images.radixfleet().pinned,
                                       "securityContext": {"runAsUser": 0}}],
                       "volumes": [{"name": "host", "hostPath": {"path": "/models"}}]}}  # fmt: skip
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(rooted),
                              check=False)  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    assert 'violates PodSecurity "restricted:v1.35"' in refused.stderr, refused.stderr
    assert 'volume "host"' in refused.stderr and "runAsNonRoot != true" in refused.stderr


CHAOS_AT_S = 3.0  # into the replay


def _under_load(url: str, key: str, chaos: Callable[[], object]) -> list[RequestResult]:
    """48-token streams at 4 a second for 14 s, `chaos` run 3 s in, retried as OpenAI's SDK
    retries (a 5xx or a failed connection before any token, twice, 0.5 s doubling: the entry
    pod a connection met may be leaving); their results."""
    items = [WorkItem(i / 4, "here", MODEL, "Say hello.", 48) for i in range(56)]
    replayer = Replayer(entries={"here": url}, retries=2, timeout_s=120,
                        headers={"Authorization": f"Bearer {key}"})  # fmt: skip

    async def run() -> list[RequestResult]:
        async def later() -> None:
            await asyncio.sleep(CHAOS_AT_S)
            await asyncio.to_thread(chaos)

        results, _ = await asyncio.gather(replayer.run(items), later())
        return results

    return asyncio.run(run())


def _gone(cluster: Cluster, namespace: str, pod: str) -> bool:
    return cluster.kubectl("get", "pod", pod, "-n", namespace, check=False).returncode != 0


def test_streams_survive_an_entry_pod_deleted_under_load(plane: tuple[Cluster, str]) -> None:
    """The entry pod that carries streams leaves the Service first (preStop), then on SIGTERM
    stops accepting and finishes them: no client sees a failure, not even a stream cut. And
    it exits by itself once drained: as PID 1 without a SIGTERM handler it ignored the signal
    and streamed on until the kubelet killed it at the end of the grace period."""
    cluster, url = plane
    _served_by_router(cluster, url, BLUE)
    # A pod that carries streams: an earlier test's rollout may leave one still terminating.
    session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)
    pod = _ready_pod(cluster, operator.NAMESPACE, ENTRY_PODS)
    assert pod is not None, "no ready entry pod after its rollout"
    victim = pod["metadata"]["name"]
    deleted_at: list[float] = []

    def delete() -> None:
        deleted_at.append(time.monotonic())
        cluster.kubectl("delete", "pod", victim, "-n", operator.NAMESPACE, "--wait=false")

    answers = _under_load(url, BLUE.key, delete)
    session.wait_for(lambda: _gone(cluster, operator.NAMESPACE, victim), timeout_s=TIMEOUT_S,
                     what=f"entry pod {victim} gone")  # fmt: skip
    stopped_s = time.monotonic() - deleted_at[0]
    session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)
    broken = [r.error for r in answers if not r.ok]
    print(
        f"entry pod deleted under load: {len(answers)} streams, {len(broken)} broken; "
        f"it stopped {stopped_s:.1f} s after the delete (grace period {entry_base.GRACE_S} s)"
    )
    assert broken == [], broken[:2]  # every stream answered whole, ending with [DONE]
    assert all(r.output_tokens == 48 for r in answers)
    # preStop (5 s), then its own drain; not killed at the grace period's end (100 s).
    assert stopped_s < entry_base.GRACE_S * 0.6


def test_streams_under_way_alone_fail_cleanly_when_the_router_pod_is_deleted(
    plane: tuple[Cluster, str],
) -> None:
    """smg carries the streams under way; a stream it drops mid-way ends with one error event
    and [DONE] (the entry's), one dropped before its first event is sent again, and new
    requests go the Knative way until the replacement router has found the predictor."""
    cluster, url = plane
    _served_by_router(cluster, url, BLUE)
    router = get(cluster, "pods", "-n", BLUE.namespace, "-l", f"{ROUTES_FOR}={REVISION}")
    victim = router["items"][0]["metadata"]["name"]
    going: list[float] = []  # from the delete to the pod's end, in the replay's seconds

    def delete() -> None:
        start = time.monotonic()
        cluster.kubectl("delete", "pod", victim, "-n", BLUE.namespace, "--wait=true")
        going.extend([CHAOS_AT_S, CHAOS_AT_S + time.monotonic() - start])

    answers = _under_load(url, BLUE.key, delete)
    session.wait_rollout(cluster, namespace=BLUE.namespace, deployment=ROUTER)
    broken = [r for r in answers if not r.ok]
    print(f"router pod deleted under load: {len(answers)} streams, {len(broken)} broken "
          f"(the pod took {going[1] - going[0]:.1f} s to go)")  # fmt: skip
    assert all(r.status == 200 for r in answers), [r.error for r in broken[:2]]
    # Only streams under way while the pod went may break (a second's margin for the clocks)...
    late = [r for r in broken if r.started > going[1] + 1 or r.ended < going[0] - 1]
    assert late == [], [(r.started, r.ended, r.error) for r in late]
    # ... and those cleanly: an error event then [DONE], never a torn stream
    assert all((r.error or "").startswith("_StreamError") for r in broken), broken


def _wait_at_zero(cluster: Cluster) -> None:
    """Until blue's model is at zero: no pod left, not even a terminating one (it still drains
    and answers for a while), and its router without workers."""

    def at_zero() -> bool:
        pods = _predictor_pods(cluster, BLUE.namespace, terminating=True)
        return not pods and not _router_workers(cluster, BLUE.namespace)

    what = f"{BLUE.namespace}/{REVISION} at zero, its router without workers"
    session.wait_for(at_zero, timeout_s=TIMEOUT_S, what=what)


def test_a_model_at_zero_is_woken_by_a_request_through_the_entry(
    plane: tuple[Cluster, str],
) -> None:
    cluster, url = plane
    _wait_at_zero(cluster)
    started = time.monotonic()
    answer = _chat(url, BLUE.key)
    woke_s = time.monotonic() - started
    assert answer.status == 200, answer.body
    assert sum(1 for t in answer.tokens() if t) >= 1, "the request held at zero was answered"
    assert answer.headers["x-radixfleet-path"] == "knative"
    assert [p["status"]["phase"] for p in _predictor_pods(cluster, BLUE.namespace)] == ["Running"]
    print(f"woken from zero through the entry and answered in {woke_s:.1f} s")


# ---- the tenants' NetworkPolicies, enforced (testbed/netpol.py) ------------------------------

WORKLOAD = "workload"  # a tenant's own pod, neither router nor predictor
# A policy's refusal drops the connection's first packet: the client sees a timeout, where a
# closed port answers at once. 4 s is long for a connect between two pods of one node.
CONNECT_TIMEOUT_S = 4.0
REACH = f"""
import concurrent.futures, json, socket, sys
def reach(address):
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout={CONNECT_TIMEOUT_S}).close()
        return "open"
    except socket.timeout:
        return "dropped"
    except OSError as error:
        return type(error).__name__
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    print(json.dumps(dict(zip(sys.argv[1:], pool.map(reach, sys.argv[1:])))))
"""


def _workload(namespace: str, image: str) -> dict[str, Any]:
    """A tenant's own pod (Pod Security `restricted`), idle, to connect from."""
    locked = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
              "capabilities": {"drop": ["ALL"]}}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": WORKLOAD, "namespace": namespace},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": WORKLOAD,
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", "import time; time.sleep(86400)"],
                    "securityContext": locked,
                }
            ],
        },
    }


def _reached(cluster: Cluster, source: tuple[str, ...], targets: list[str]) -> dict[str, str]:
    """How each `host:port` answered a connection from `source` (kubectl exec's target):
    `open`, `dropped` (no answer: a policy's refusal) or the error a closed port gives."""
    done = cluster.kubectl("exec", *source, "--", "python3", "-c", REACH, *targets)
    reached: dict[str, str] = json.loads(done.stdout)
    return reached


def _ready_pod(cluster: Cluster, namespace: str, selector: str) -> dict[str, Any] | None:
    """A ready pod the selector picks (None when none is ready), never one already
    terminating."""
    for pod in get(cluster, "pods", "-n", namespace, "-l", selector)["items"]:
        if is_ready(pod) and not pod["metadata"].get("deletionTimestamp"):
            found: dict[str, Any] = pod
            return found
    return None


def _pod_ip(cluster: Cluster, namespace: str, selector: str) -> str | None:
    """The IP of a ready pod the selector picks (None when none is ready), never of one already
    terminating."""
    pod = _ready_pod(cluster, namespace, selector)
    return None if pod is None else str(pod["status"]["podIP"])


class _KeepAwake(session.Senders):
    """One client chatting with a team's model through the entry until the block ends, so that
    Knative keeps its pod (blue scales to zero some 36 s after its last request: a check that
    looked its pod up once saw it go, under load)."""

    def __init__(self, url: str, team: Team) -> None:
        super().__init__(count=1, join_timeout_s=300)
        self.url, self.team = url, team

    def _send(self, index: int) -> None:
        while not self.stop.is_set():
            answer = _chat(self.url, self.team.key)  # the first wakes the model at zero
            if answer.status != 200:
                self.failures.append(f"{answer.status}: {answer.body[:200]}")
            self.stop.wait(1.0)


def _ready_pod_ip(cluster: Cluster, namespace: str, selector: str) -> str:
    """The IP of a ready pod the selector picks, once there is one."""
    found: list[str] = []

    def ready() -> bool:
        ip = _pod_ip(cluster, namespace, selector)
        found[:] = [ip] if ip else []
        return bool(found)

    session.wait_for(ready, timeout_s=TIMEOUT_S, what=f"a ready pod of {selector}")
    return found[0]


def test_enforced_network_policies_let_the_data_plane_through_and_keep_tenant_pods_out(
    plane: tuple[Cluster, str],
) -> None:
    """The catalog's NetworkPolicies, rendered for both tenants, and radixfleet's namespace's
    (deploy/operator/, deploy/entry/), under kube-network-policies: chats through the entry
    still reach both models (the entry to routers, routers to predictors, Knative's activator),
    and nothing else gets in: a tenant's own pod reaches neither its router nor its predictor
    (it must go through the entry, which charges it), the other tenant's pod neither,
    Prometheus' namespace only the router's metrics port; a tenant's pod reaches the entry, but
    neither its metrics (every tenant's models and token counts) nor the operator's, which
    Prometheus' namespace reaches; and a model at zero is woken through the entry. The same
    connections all open before the enforcer runs: the policies alone, on this bridge CNI, do
    nothing."""
    cluster, url = plane
    image = images.radixfleet().pinned
    policies = [policy for team in TEAMS for policy in build_network_policies(team.namespace)]
    # Prometheus' own pod has no shell or Python to connect from; the policies admit its
    # namespace, so a pod beside it connects as it does.
    sources = [*(team.namespace for team in TEAMS), prometheus.NAMESPACE]
    session.apply(cluster, [*policies, *(_workload(namespace, image) for namespace in sources)])
    try:
        for namespace in sources:
            cluster.kubectl("wait", "--for=condition=Ready", f"pod/{WORKLOAD}", "-n",
                            namespace, "--timeout=120s")  # fmt: skip
        checks = _reach_checks(cluster, url)
        assert set(checks().values()) == {"open"}, "no enforcer yet: every connection opens"
        with netpol.enforcing(cluster):
            for team in TEAMS:
                assert _chat(url, team.key).status == 200, f"{team.namespace} through the entry"
            assert checks() == {
                "blue's workload -> blue's router": "dropped",
                "blue's workload -> blue's predictor": "dropped",
                "blue's workload -> the entry": "open",
                "blue's workload -> the entry's metrics": "dropped",
                "blue's workload -> the operator's metrics": "dropped",
                "green's workload -> blue's router": "dropped",
                "green's workload -> blue's predictor": "dropped",
                "the entry -> blue's router": "open",
                "the entry -> blue's predictor": "open",
                "monitoring's pod -> blue's router metrics": "open",
                "monitoring's pod -> blue's router": "dropped",
                "monitoring's pod -> blue's predictor": "open",
                "monitoring's pod -> the entry's metrics": "open",
                "monitoring's pod -> the operator's metrics": "open",
            }
            # Knative's path: its autoscaler sees the request the activator holds, scales
            # from zero, and the activator hands the request to the new pod.
            _wait_at_zero(cluster)
            woken = _chat(url, BLUE.key)
            assert woken.status == 200 and any(woken.tokens()), woken.body[:300]
        assert set(checks().values()) == {"open"}, "the enforcer gone, its rules went with it"
    finally:
        managed = f"{labels.MANAGED_BY}={labels.MANAGER}"
        for team in TEAMS:
            cluster.kubectl("delete", "networkpolicy", "-l", managed, "-n", team.namespace,
                            "--wait=false", check=False)  # fmt: skip
        for namespace in sources:
            cluster.kubectl("delete", "pod", WORKLOAD, "-n", namespace, "--wait=false",
                            check=False)  # fmt: skip


def _reach_checks(cluster: Cluster, url: str) -> Callable[[], dict[str, str]]:
    """The connections' outcomes (`_connections`), taken while a client keeps blue awake."""

    def checks() -> dict[str, str]:
        # Knative keeps blue's pod for as long as the connections take to try (the dropped
        # ones take CONNECT_TIMEOUT_S each); the model at zero is tested on its own.
        with _KeepAwake(url, BLUE) as awake:
            outcome = _connections(cluster)
        assert awake.failures == [], awake.failures
        return outcome

    return checks


def _connections(cluster: Cluster) -> dict[str, str]:
    """Each named connection's outcome, from the pods that would open it, to blue's ready
    router and predictor pods."""
    router = _ready_pod_ip(cluster, BLUE.namespace,
                             f"{labels.COMPONENT}={labels.ROUTER_COMPONENT}")  # fmt: skip
    predictor = _ready_pod_ip(cluster, BLUE.namespace, f"serving.knative.dev/revision={REVISION}")
    entry = _ready_pod_ip(cluster, operator.NAMESPACE, ENTRY_PODS)
    controllers = _ready_pod_ip(cluster, operator.NAMESPACE, OPERATOR_SELECTOR)
    targets = {"blue's router": f"{router}:8000", "blue's router metrics": f"{router}:29000",
               "blue's predictor": f"{predictor}:8012", "the entry": f"{entry}:{entry_base.PORT}",
               "the entry's metrics": f"{entry}:{entry_base.METRICS_PORT}",
               "the operator's metrics": f"{controllers}:{METRICS_PORT}"}  # fmt: skip
    data_plane = ("blue's router", "blue's predictor")
    platform = ("the entry", "the entry's metrics", "the operator's metrics")
    sources = {
        "blue's workload": (("-n", BLUE.namespace, WORKLOAD), (*data_plane, *platform)),
        "green's workload": (("-n", GREEN.namespace, WORKLOAD), data_plane),
        "the entry": (("-n", operator.NAMESPACE, f"deployment/{entry_base.NAME}"), data_plane),
        "monitoring's pod": (("-n", prometheus.NAMESPACE, WORKLOAD),
                             ("blue's router metrics", *data_plane, *platform[1:])),
    }  # fmt: skip
    outcome = {}
    for source, (where, names) in sources.items():
        reached = _reached(cluster, where, [targets[name] for name in names])
        for name in names:
            outcome[f"{source} -> {name}"] = reached[targets[name]]
    return outcome


# ---- pre-warming: a new pod out of its router until its cache holds the hot prefixes ---------

AMBER = Team("amber", "sk-amber-0c4e", 6_000_000, {})
SYSTEM = "You answer questions about the radixfleet platform, briefly and exactly. " * 16


def _pooled_model(image: str, team: Team = AMBER) -> dict[str, Any]:
    """The team's `chat` as the catalog renders a model now: its pods labelled `pool: serving`."""
    isvc = emulated_isvc(
        image, name=MODEL, namespace=team.namespace, mode="Knative", min_replicas=1,
        max_replicas=2, labels={"radixfleet.io/tenant": team.name},
        annotations={"radixfleet.io/gpu-type": "H100", "radixfleet.io/gpus-per-replica": "1"},
    )  # fmt: skip
    isvc["spec"]["predictor"]["labels"] = {labels.POOL: labels.SERVING_POOL}
    return isvc


def _generate(url: str, key: str, text: str) -> Any:
    body = json.dumps({"model": MODEL, "text": text, "sampling_params": {"max_new_tokens": 1}})
    headers = {"Content-Type": "application/json", **dataplane.bearer(key)}
    request = urllib.request.Request(f"{url}/generate", data=body.encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.load(answer)


def _pods_of(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return [p for p in _predictor_pods(cluster, namespace) if p["status"].get("podIP")]


def test_a_new_pod_is_warmed_out_of_its_routers_selection_and_then_joins_it(
    plane: tuple[Cluster, str], kube_client: Any
) -> None:
    """The path of pre-warming in a cluster, on the test cluster's API server, Knative, kubelet,
    smg and entry: a revision whose pods carry the pool label gets a router selecting `serving`
    pods; a second pod is taken out before it is ready, and the router does not list it while it
    warms; the entry gives the hot prefix (the system prompt of the requests it routed); the pod
    is sent it and joins the router; a new question is then served mostly from its cache. The
    warmer runs in the test process with the operator's adapters; the queues it reads come from
    a stand-in for the autoscaler's Prometheus reading (none scrapes this cluster's pods)."""
    cluster, url = plane
    # The image the other tenants' models run (loaded into the node by the fixture)
    image = get(cluster, "isvc", MODEL, "-n", BLUE.namespace)["spec"]["predictor"]["model"]["image"]
    _onboard(cluster, AMBER, image, model=_pooled_model(image))
    try:
        _wait_ready(cluster, AMBER)
        revision = get(cluster, "revision", REVISION, "-n", AMBER.namespace)
        assert revision["metadata"]["labels"][labels.POOL] == labels.SERVING_POOL
        _wait_router(cluster, AMBER.namespace)
        router = get(cluster, "deployment", ROUTER, "-n", AMBER.namespace)
        args = " ".join(router["spec"]["template"]["spec"]["containers"][0]["args"])
        assert f"--selector serving.knative.dev/revision={REVISION} radixfleet.io/pool=serving" in (
            args
        )
        session.wait_for(lambda: len(_router_workers(cluster, AMBER.namespace)) == 1,
                         timeout_s=TIMEOUT_S, what="the router lists the first pod")  # fmt: skip
        # The entry counts their prefixes; each of its two replicas sees about half of them
        for i in range(16):
            _generate(url, AMBER.key, f"{SYSTEM}Question {i}: what does a router do?")
        _warm_a_second_pod(cluster, kube_client, url)
    finally:
        offboard(cluster, AMBER.tenant)


def _warm_a_second_pod(cluster: Cluster, kube_client: Any, url: str) -> None:
    (first,) = _pods_of(cluster, AMBER.namespace)
    quiet = Observed(ready=1, waiting=0, replicas=(
        ReplicaMetrics(first["metadata"]["name"], running=0, queued=0, kv_usage=0.1),))  # fmt: skip
    spec = AutoscalePolicySpec(inference_service=MODEL)
    pods = KubePods(kube_client)
    warmer = Warmer(pods=pods, keys=KubeDataPlaneKeys(kube_client), http=HttpWarmUp(url))
    KubeRevisions(kube_client).set_scale(AMBER.namespace, REVISION, scale_annotations(2, 2))
    workers_while_warming: list[int] = []

    def joined() -> bool:
        warmer.tick(AMBER.namespace, spec, REVISION, quiet, now=datetime.now(UTC), desired=2)
        second = [p for p in _pods_of(cluster, AMBER.namespace)
                  if p["metadata"]["name"] != first["metadata"]["name"]]  # fmt: skip
        if not second:
            return False
        meta = second[0]["metadata"]
        if meta["labels"].get(labels.POOL) == labels.WARMING_POOL:
            workers_while_warming.append(len(_router_workers(cluster, AMBER.namespace)))
        return WARMED in (meta.get("annotations") or {})

    session.wait_for(joined, timeout_s=TIMEOUT_S, what="a second pod warmed and put back")
    (second,) = [p for p in _pods_of(cluster, AMBER.namespace)
                 if p["metadata"]["name"] != first["metadata"]["name"]]  # fmt: skip
    note = second["metadata"]["annotations"][WARMED]
    assert second["metadata"]["labels"][labels.POOL] == labels.SERVING_POOL
    sent, _, total = note.partition(" prefixes")[0].partition(" of ")
    assert sent == total and int(total) >= 1, note
    assert workers_while_warming and set(workers_while_warming) == {1}, workers_while_warming
    session.wait_for(lambda: len(_router_workers(cluster, AMBER.namespace)) == 2,
                     timeout_s=60, what="the router lists the warmed pod")  # fmt: skip
    key = _data_plane_key(cluster, AMBER.namespace)
    pod_url = f"http://{second['status']['podIP']}:8012"
    answer = _generate(pod_url, key, f"{SYSTEM}Question 9: what is a revision?")
    cached, prompt = answer["meta_info"]["cached_tokens"], answer["meta_info"]["prompt_tokens"]
    assert cached >= 0.8 * prompt * len(SYSTEM) / len(SYSTEM + "Question 9: what is a revision?")
    print(
        f"pre-warmed a second pod: {note}; a new question then found {cached} of {prompt} "
        "prompt tokens in its cache"
    )


# ---- the data plane's key rotated while traffic flows -----------------------------------------

# Room for both revisions' pods while the rotation rolls out (and the dry run of a third).
VIOLET = Team("violet", "sk-violet-2d81", 6_000_000, {}, gpus=4)
NEW_KEY = "api-key-2"
ROTATED_REVISION = f"{MODEL}-predictor-00002"


class Clients(session.Senders):
    """One client chatting with a team's `chat` through the entry until the block ends: the
    status of every answer, and which revision served each 200."""

    def __init__(self, url: str, team: Team) -> None:
        super().__init__(count=1, join_timeout_s=300)
        self.url, self.team = url, team
        self.answers: list[tuple[int, str]] = []

    def _send(self, index: int) -> None:
        while not self.stop.is_set():
            answer = _chat(self.url, self.team.key, timeout_s=60)
            self.answers.append((answer.status, answer.headers.get("x-radixfleet-revision", "")))
            time.sleep(0.1)


def _serves_only(cluster: Cluster, url: str, revision: str) -> bool:
    """Whether the entry's replicas (two, each syncing on its own) all route to `revision`."""
    served = [_chat(url, VIOLET.key).headers.get("x-radixfleet-revision") for _ in range(8)]
    return set(served) == {f"{VIOLET.namespace}/{revision}"}


def _key_read_by(obj: dict[str, Any]) -> str | None:
    return dataplane.key_name(obj["spec"]["template"]["spec"])


def test_the_data_plane_key_rotates_with_no_401_while_a_client_chats(
    plane: tuple[Cluster, str],
) -> None:
    """The rotation of radixfleet.dataplane, as a platform team runs it, with a client
    chatting through the entry all along: a second key added to the namespace's Secret; the
    InferenceService annotated with its name, so a new revision's pods (KServe fills the
    runtime's placeholder) and its router (the routers controller reads the revision) read it;
    the old key removed once the entry sends only to the new revision. No answer but 200, and
    the new revision's router takes the new key and refuses the old."""
    cluster, url = plane
    image = get(cluster, "isvc", MODEL, "-n", BLUE.namespace)["spec"]["predictor"]["model"]["image"]
    model = _model(image, VIOLET)
    model["spec"]["predictor"]["minReplicas"] = 1
    _onboard(cluster, VIOLET, image, model=model)
    try:
        _wait_ready(cluster, VIOLET)
        _served_by_router(cluster, url, VIOLET)
        old = _data_plane_key(cluster, VIOLET.namespace)
        new = secrets.token_hex(32)
        with Clients(url, VIOLET) as client:
            _rotate_to(cluster, url, new)
            time.sleep(3)  # the client's chats after the old key went
        statuses = [status for status, _ in client.answers]
        assert statuses and set(statuses) == {200}, client.answers
        served = {revision for _, revision in client.answers}
        assert f"{VIOLET.namespace}/{ROTATED_REVISION}" in served, served
        router = get(cluster, "service", f"{ROTATED_REVISION}-router", "-n", VIOLET.namespace)
        base = f"http://{router['spec']['clusterIP']}:8000"
        assert _call(base, dataplane.bearer(new)) == 200
        assert _call(base, dataplane.bearer(old)) == 401
        print(f"rotated the data-plane key: {len(statuses)} chats meanwhile, all 200")
    finally:
        offboard(cluster, VIOLET.tenant)


def _rotate_to(cluster: Cluster, url: str, new: str) -> None:
    namespace = VIOLET.namespace
    patch = {"stringData": {NEW_KEY: new}}
    cluster.kubectl("patch", "secret", dataplane.SECRET, "-n", namespace, "--type=merge",
                    "-p", json.dumps(patch))  # fmt: skip
    cluster.kubectl("annotate", "isvc", MODEL, "-n", namespace,
                    f"{dataplane.KEY_ANNOTATION}={NEW_KEY}")  # fmt: skip

    def rolled_out() -> bool:
        predictor = get(cluster, "isvc", MODEL, "-n", namespace)["status"]["components"]
        traffic = predictor["predictor"].get("traffic") or []
        return [(t["revisionName"], t["percent"]) for t in traffic] == [(ROTATED_REVISION, 100)]

    session.wait_for(rolled_out, timeout_s=TIMEOUT_S, what=f"{ROTATED_REVISION} takes it all")
    revision = get(cluster, "revision", ROTATED_REVISION, "-n", namespace)
    assert dataplane.key_name(revision["spec"]) == NEW_KEY, revision["spec"]
    session.wait_for(
        lambda: cluster.kubectl("get", "deployment", f"{ROTATED_REVISION}-router", "-n",
                                namespace, check=False).returncode == 0,
        timeout_s=TIMEOUT_S, what="the new revision's router",
    )  # fmt: skip
    router = get(cluster, "deployment", f"{ROTATED_REVISION}-router", "-n", namespace)
    assert _key_read_by(router) == NEW_KEY
    session.wait_for(lambda: _serves_only(cluster, url, ROTATED_REVISION), timeout_s=TIMEOUT_S,
                     what=f"the entry sends only to {ROTATED_REVISION}")  # fmt: skip
    remove = [{"op": "remove", "path": f"/data/{dataplane.KEY}"}]
    cluster.kubectl("patch", "secret", dataplane.SECRET, "-n", namespace, "--type=json",
                    "-p", json.dumps(remove))  # fmt: skip


# ---- a canary's baseline: carved out of the stable revision, sent the canary's share ---------

TEAL = Team("teal", "sk-teal-9b21", 6_000_000, {}, gpus=4)
CANARY_REVISION = f"{MODEL}-predictor-00002"
BASELINE_ROUTER = f"{REVISION}-baseline-router"
# One judged step; intervals at the CRD's floor and few requests, to fit a test.
CANARY_POLICY = {"steps": [50], "intervalSeconds": 10, "minRequests": 5, "baseline": True}


def _canary_policy() -> dict[str, Any]:
    return {"apiVersion": "radixfleet.io/v1alpha1", "kind": "CanaryPolicy",
            "metadata": {"name": "default", "namespace": TEAL.namespace},
            "spec": CANARY_POLICY}  # fmt: skip


def _rollout(cluster: Cluster) -> dict[str, Any]:
    policy = get(cluster, "canarypolicy", "default", "-n", TEAL.namespace)
    rollouts = (policy.get("status") or {}).get("rollouts") or [{}]
    found: dict[str, Any] = rollouts[0]
    return found


def _pools(cluster: Cluster) -> list[str]:
    return sorted(
        p["metadata"]["labels"].get(labels.POOL, "") for p in _pods_of(cluster, TEAL.namespace)
    )


def _twice_slower(model: dict[str, Any]) -> None:
    """A new version of `model` whose every prefill and decode takes twice as long."""
    container = model["spec"]["predictor"]["model"]
    container["env"] = [
        *container.get("env", []),
        {"name": "MODEL_VERSION", "value": "v2"},
        {"name": "RADIXFLEET_EMULATOR_TIME_SCALE", "value": "2"},
    ]


class Chats(session.Senders):
    """Two clients chatting with TEAL's `chat` through the entry until the block ends; what
    each answer's headers said served it, and any failure."""

    def __init__(self, url: str) -> None:
        super().__init__(join_timeout_s=300)
        self.url = url
        self.served: list[tuple[str, str, str]] = []

    def _send(self, index: int) -> None:
        while not self.stop.is_set():
            answer = _chat(self.url, TEAL.key)
            if answer.status != 200:
                self.failures.append(f"{answer.status}: {answer.body[:200]}")
                continue
            self.served.append((answer.headers["x-radixfleet-revision"],
                                answer.headers.get("x-radixfleet-pool", "serving"),
                                answer.headers["x-radixfleet-path"]))  # fmt: skip


def test_a_canary_is_judged_beside_a_baseline_carved_out_of_the_stable_revision(
    plane: tuple[Cluster, str], kube_client: Any
) -> None:
    """The cluster path of a canary's baseline, with the deployed operator, entry and the
    cluster's Prometheus: under a policy with `baseline: true`, one of the stable revision's two
    pods is relabelled `baseline` as the canary comes up (never the last serving one), the
    routers controller gives the stable revision a baseline router that lists that pod alone,
    the rollout's status records it, and the entry sends it the canary's share through that
    router; the operator judges a twice-slower canary against the baseline's series (scraped
    with `pool="baseline"` by the predictors' PodMonitor) and rolls it back; the pod goes back
    and the router is parked."""
    cluster, url = plane
    image = get(cluster, "isvc", MODEL, "-n", BLUE.namespace)["spec"]["predictor"]["model"]["image"]
    model = _pooled_model(image, TEAL)
    model["metadata"]["annotations"]["radixfleet.io/canary-policy"] = "default"
    model["spec"]["predictor"]["canaryTrafficPercent"] = 0
    _onboard(cluster, TEAL, image, model=model)
    try:
        _wait_ready(cluster, TEAL)
        KubeRevisions(kube_client).set_scale(TEAL.namespace, REVISION, scale_annotations(2, 2))
        session.wait_for(lambda: _pools(cluster) == ["serving", "serving"], timeout_s=TIMEOUT_S,
                         what="two serving pods of the stable revision")  # fmt: skip
        session.apply(cluster, [_canary_policy()])
        _twice_slower(model)
        session.apply(cluster, [model])
        _carved(cluster)
        with Chats(url) as chats:
            _rolled_back_against_the_baseline(cluster, chats)
        assert not chats.failures, chats.failures[:5]
        _released(cluster)
    finally:
        offboard(cluster, TEAL.tenant)


def _carved(cluster: Cluster) -> None:
    def carved() -> bool:
        baseline = _rollout(cluster).get("baseline") or {}
        return baseline == {"revision": REVISION, "ready": 1} and _pools(cluster) == [
            "baseline", "serving"
        ]  # fmt: skip

    session.wait_for(carved, timeout_s=TIMEOUT_S, what="a baseline of one stable pod, recorded")
    session.wait_for(
        lambda: len(_router_workers(cluster, TEAL.namespace, BASELINE_ROUTER)) == 1,
        timeout_s=TIMEOUT_S, what=f"{BASELINE_ROUTER} lists the baseline pod",
    )  # fmt: skip
    router = get(cluster, "deployment", BASELINE_ROUTER, "-n", TEAL.namespace)
    args = " ".join(router["spec"]["template"]["spec"]["containers"][0]["args"])
    assert f"--selector serving.knative.dev/revision={REVISION} radixfleet.io/pool=baseline" in args
    assert len(_router_workers(cluster, TEAL.namespace)) == 1  # the stable's: its other pod


def _rolled_back_against_the_baseline(cluster: Cluster, chats: Chats) -> None:
    session.wait_for(lambda: _rollout(cluster).get("phase") == "RolledBack" or bool(chats.failures),
                     timeout_s=TIMEOUT_S, what="the judge to roll the canary back")  # fmt: skip
    rollout, served = _rollout(cluster), list(chats.served)
    print(f"\nrolled back: {rollout['lastDecision']['reason']}; measured {rollout['measured']}; "
          f"{len(served)} answers, {len(set(served))} paths: {sorted(set(served))}")  # fmt: skip
    assert not chats.failures, chats.failures[:5]
    assert (f"{TEAL.namespace}/{REVISION}", "baseline", "router") in served
    assert (f"{TEAL.namespace}/{CANARY_REVISION}", "serving", "router") in served
    # judged on the baseline's own series, read from Prometheus, not on a deadline or an abort
    reason = rollout["lastDecision"]["reason"]
    assert reason.startswith(f"rolling back {CANARY_REVISION}: failed 2 of 2"), reason
    assert ", baseline " in reason, reason
    assert rollout["measured"]["baseline"]["requests"] >= CANARY_POLICY["minRequests"]


def _released(cluster: Cluster) -> None:
    def released() -> bool:
        rollout = _rollout(cluster)
        return "baseline" not in rollout and _pools(cluster) == ["serving", "serving"]

    session.wait_for(released, timeout_s=TIMEOUT_S, what="the baseline pod put back")

    def parked() -> bool:
        router = get(cluster, "deployment", BASELINE_ROUTER, "-n", TEAL.namespace)
        return bool(router["spec"]["replicas"] == 0)

    session.wait_for(parked, timeout_s=TIMEOUT_S, what=f"{BASELINE_ROUTER} parked")


# ---- a tenant's debt outlives the entry pods that held it (radixfleet/controllers/quota/carry.py)
# -----------

ENTRY_PODS = f"app.kubernetes.io/name={entry_base.NAME}"
# Green's budget while the entry restarts: 60 tokens a minute, 0.5 a second per entry replica,
# so whatever one answer left it owing is still owed minutes later, however slow the restart.
SLOW_REPAY = 60
# The long answer's tokens. Until the cut budget reaches the entry, a replica refills at its share
# of green's own budget (300 a minute): 200 tokens were repaid in one loaded run before the new
# pods' rollout ended, the debt's key left the ledger, and the test found no holder. A thousand
# outlast any such wait, and the answer takes a few seconds more.
LONG_ANSWER: dict[str, Any] = {"max_tokens": 1000, "min_tokens": 1000, "ignore_eos": True}


def _green_owed(cluster: Cluster) -> dict[str, float]:
    """What each entry replica's ledger entry says green owes (its overall bucket), by pod."""
    found = get(cluster, "configmap", ENTRY_LEDGER, "-n", operator.NAMESPACE).get("data") or {}
    owed = {pod: Owed.from_wire(text) for pod, text in found.items()}
    return {pod: o.tokens.get((GREEN.name, None), 0.0) for pod, o in owed.items() if o}


def _green_budget(cluster: Cluster, per_minute: int) -> None:
    patch = {"spec": {"tokenBudget": {"tokensPerMinute": per_minute}}}
    cluster.kubectl("patch", "tenant", GREEN.name, "--type=merge", "-p", json.dumps(patch))


def test_a_tenants_debt_outlives_the_entry_pods_that_held_it(plane: tuple[Cluster, str]) -> None:
    """Green is served a long answer, which leaves the replica that served it owing; its budget
    is then cut (a change forgives nothing), and both entry pods are deleted. Their last words go
    into the entry's ledger ConfigMap, a new pod takes the debt on, and, asked directly, refuses
    green for as long as the debt takes to repay. Before, a restarted entry (a rollout, a
    drained node, an OOM kill), or a changed budget, forgave it. Last in the module: green
    stays owing for minutes after it."""
    cluster, url = plane
    served = _chat(url, GREEN.key, **LONG_ANSWER)
    for _ in range(30):  # an earlier test may have left green owing: wait its turn
        if served.status == 200:
            break
        time.sleep(int(served.headers.get("Retry-After", "5")))
        served = _chat(url, GREEN.key, **LONG_ANSWER)
    assert served.status == 200, served.body[:300]
    _green_budget(cluster, SLOW_REPAY)
    try:
        # The settled debt, written by the replica at its next pass (every 5 s).
        time.sleep(12)
        owing = _green_owed(cluster)
        assert max(owing.values(), default=0) > 5, owing  # a fresh replica owes nothing
        old = {p["metadata"]["name"] for p in get(cluster, "pods", "-n", operator.NAMESPACE,
                                                    "-l", ENTRY_PODS)["items"]}  # fmt: skip
        cluster.kubectl("delete", "pods", "-l", ENTRY_PODS, "-n", operator.NAMESPACE,
                        "--wait=false")  # fmt: skip

        def taken_on() -> bool:
            owed = _green_owed(cluster)
            return bool(owed) and not set(owed) & old and max(owed.values()) > 0

        session.wait_for(taken_on, timeout_s=TIMEOUT_S, what="green's debt taken on by a new pod")
        session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)
        holder, owed = max(_green_owed(cluster).items(), key=lambda kv: kv[1])
        ip = get(cluster, "pod", holder, "-n", operator.NAMESPACE)["status"]["podIP"]
        refused = _chat(f"http://{ip}:{entry_base.PORT}", GREEN.key)
    finally:
        _green_budget(cluster, GREEN.tokens_per_minute)
    print(f"green owed {max(owing.values()):.0f} tokens before the restart, {owed:.0f} to "
          f"{holder} after it")  # fmt: skip
    assert refused.status == 429, refused.body[:300]
    # A fresh replica admits a first short chat; this one asks green to wait for its debt.
    assert int(refused.headers["Retry-After"]) >= 5, refused.headers
