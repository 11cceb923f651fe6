"""`pulumi up` of the Pulumi program, for real, on the test cluster: the `kubernetes` cloud (a
cluster the team already runs), with the Pulumi CLI and pulumi-kubernetes' provider built here
(testbed/pulumi_stack.py). What runs for real: the program, the CLI, the provider, its awaits,
the API server and every object the program declares (CRDs, the operator, the entry, the
runtimes, the tenant, its namespace and model). What differs from a platform team's cluster:
KServe, Knative and prometheus-operator were installed by the test bed (not by Pulumi), and the
node has 2 cores and 24 GiB, so an admission
policy `make cluster` installs brings the predictor pod's CPU and memory requests down
(`testbed.emulated.fit_to_the_node`; its GPU stays). The program runs unmodified.

Proven, in order, on a fresh cluster of this module's own (the session's holds what other
modules left behind), started as a newcomer's `make cluster` starts one (KServe from its charts
with infra's values, Knative Serving, prometheus-operator, the KIngress marker) and taken down
as `make cluster-down` does: `up` ends green (every Deployment Available: both operator replicas
Ready); Prometheus scrapes what the program's PodMonitors select and loaded its alerting and
recording rules; the tenant's model, once its weights are there, answers a chat through the
entry with the key the stack holds; a key added through the stack works and one removed through
it is refused, while a chat with another key never fails meanwhile;
`kubectl apply --server-side` cannot change what `up` made (a conflict with Pulumi's
field manager); the quota's GPU-budget policy refuses a model past the tenant's budget; a
second `up` changes nothing; `destroy` leaves no object of ours.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from infra.manifests import SYSTEM_NODE_LABELS, prometheus_rules
from radixfleet import labels
from radixfleet.config import load_catalog
from radixfleet.config.serving import api_keys_secret
from radixfleet.render import entry as entry_base
from radixfleet.render import operator
from testbed import images, pulumi_stack, session
from testbed.__main__ import MARKER_PID
from testbed.cluster import Cluster
from testbed.emulated import get, model_volume, ready
from testbed.layout import NODE_NAME
from tests.cluster.conftest import REPO

# Its own cluster, beside the session's: a group of its own, on the other worker (conftest).
pytestmark = [pytest.mark.cluster, pytest.mark.own_cluster]

CATALOG = REPO / "tests/data/pulumi/catalog.yaml"
REGION, TENANT, NAMESPACE, MODEL = "local", "pulumi-team", "pulumi-team", "chat"
TIMEOUT_S = 300.0
# The tenant's key the stack starts with, and the one its rotation adds (the stack's secrets).
FIRST_KEY, NEXT_KEY = secrets.token_hex(32), secrets.token_hex(32)


def _image(record: images.ImageRecord, tag: str) -> dict[str, str]:
    """A stack's image setting for an image of the test bed (loaded into the node by digest)."""
    return {"image": record.reference.rpartition(":")[0], "tag": tag,
            "digest": record.digest}  # fmt: skip


def stack_config(
    cluster: Cluster, radixfleet: images.ImageRecord, smg: images.ImageRecord
) -> dict[str, Any]:
    """The stack a team writes for its existing cluster, for the test cluster: its kubeconfig,
    images by digest, the test catalog; the emulated SGLang replica (radixfleet's image) as
    the runtime's image."""
    return {
        "radixfleet:cloud": "kubernetes",
        "radixfleet:catalog": str(CATALOG),
        "radixfleet:clusters": {
            REGION: {"kubeconfig": str(cluster.kubeconfig)}  # monitoring: on, the default
        },
        "radixfleet:fleetToken": secrets.token_hex(24),
        "radixfleet:tenantKeys": {TENANT: {"api-key": FIRST_KEY}},
        "radixfleet:runtime": _image(radixfleet, "0.1.0"),
        "radixfleet:controllers": {
            **_image(radixfleet, "0.1.0"),
            "replicas": 2,
            "entryReplicas": 1,
            "router": _image(smg, "1.13.0"),
        },
    }


@dataclass
class Deployed:
    cluster: Cluster
    stack: auto.Stack
    first_up: auto.UpResult
    up_seconds: float
    output: list[str]


@pytest.fixture(scope="module")
def platform(cluster_for_people: Cluster) -> Cluster:
    """A cluster with KServe and Knative only, as `make cluster` leaves one: what a team's
    existing cluster brings. Not the session's, where other modules leave their objects (and
    their finalizers). Its node then loses the label of infra's system nodes (KServe's
    controller, placed by it, is running): a team's cluster has no such label, and the stack
    must not need one."""
    cluster_for_people.kubectl("label", "node", NODE_NAME,
                               *(f"{k}-" for k in SYSTEM_NODE_LABELS))  # fmt: skip
    return cluster_for_people


@pytest.fixture(scope="module")
def deployed(platform: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    radixfleet, smg = images.radixfleet(), images.smg()
    session.load_images(platform, [radixfleet, smg])
    work = tmp_path_factory.mktemp("pulumi")
    stack = pulumi_stack.stack(work, "test-bed", stack_config(platform, radixfleet, smg))
    output: list[str] = []
    started = time.monotonic()
    try:
        result = stack.up(on_output=output.append, color="never")
        yield Deployed(platform, stack, result, time.monotonic() - started, output)
    finally:
        stack.destroy(on_output=output.append, color="never")


def _weights_in_place(cluster: Cluster) -> None:
    """What the platform team adds after `up`, here: the model's weights (a claim on the node's
    folder, in place of an object store). The tenant's key came with `up`, from the stack."""
    session.apply(cluster, model_volume(cluster, namespace=NAMESPACE, model=MODEL,
                                        data_plane_key=False))  # fmt: skip


def _chat(url: str, key: str) -> tuple[int, str]:
    body = {"model": MODEL, "stream": False, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Say hello."}]}  # fmt: skip
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:  # no answer: refused, reset, timed out
        return 0, str(error)


def test_make_cluster_left_the_platform_running(platform: Cluster) -> None:
    for namespace, deployment in (("kserve", "kserve-controller-manager"),
                                  ("knative-serving", "activator"),
                                  ("monitoring", "prometheus-operator")):  # fmt: skip
        found = get(platform, "deployment", deployment, "-n", namespace)
        conditions = {c["type"]: c["status"] for c in found["status"]["conditions"]}
        assert conditions["Available"] == "True", (deployment, found["status"])
    marker = int((platform.layout.run_dir / MARKER_PID).read_text())
    os.kill(marker, 0)  # the KIngress marker runs (ProcessLookupError if not)


def test_up_is_green_with_every_deployment_available(deployed: Deployed) -> None:
    print(f"\npulumi up (first): {deployed.up_seconds:.0f} s, "
          f"{deployed.first_up.summary.resource_changes}")  # fmt: skip
    assert deployed.first_up.summary.result == "succeeded", "".join(deployed.output[-50:])
    for name in (operator.NAME, entry_base.NAME):
        found = get(deployed.cluster, "deployment", name, "-n", operator.NAMESPACE)
        conditions = {c["type"]: c["status"] for c in found["status"]["conditions"]}
        assert conditions["Available"] == "True", found["status"]


def _entry_url(cluster: Cluster) -> str:
    service = get(cluster, "service", entry_base.NAME, "-n", operator.NAMESPACE)
    return f"http://{service['spec']['clusterIP']}"


def _until_answered(url: str, key: str, status: int) -> tuple[int, str]:
    """The first answer with `status` to a chat with `key` (the entry reads keys and routes
    every few seconds)."""
    answers: list[tuple[int, str]] = []

    def answered() -> bool:
        answers.append(_chat(url, key))
        return answers[-1][0] == status

    session.wait_for(answered, timeout_s=TIMEOUT_S,
                     what=f"{status} to a chat through the entry: {answers[-1:]}")  # fmt: skip
    return answers[-1]


def test_the_tenants_model_answers_through_the_entry_with_the_stacks_key(
    deployed: Deployed,
) -> None:
    cluster = deployed.cluster
    secret = get(cluster, "secret", api_keys_secret(load_catalog(CATALOG).tenant(TENANT)),
                 "-n", NAMESPACE)  # fmt: skip
    assert sorted(secret["data"]) == ["api-key"], "up did not write the stack's key"
    _weights_in_place(cluster)
    session.wait_for(lambda: ready(cluster, "isvc", MODEL, NAMESPACE), timeout_s=TIMEOUT_S,
                     what=f"{NAMESPACE}/{MODEL} Ready")  # fmt: skip
    _, body = _until_answered(_entry_url(cluster), FIRST_KEY, 200)
    assert json.loads(body)["choices"][0]["message"]["content"]


class _Chatter:
    """Chats through the entry with one key, one after another, on a thread, until stopped;
    keeps each answer's status in order, and the time and body of each that is not a 200."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key, self.statuses = url, key, list[int]()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            status, body = _chat(self.url, self.key)
            self.statuses.append(status)
            if status != 200:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {status} {body[:300]}")

    def stop(self, *, at_least: int = 5, wait_s: float = 60.0) -> list[int]:
        """Stop once it has `at_least` answers (or after `wait_s`): a rotation that `up` made
        in a few seconds must still have been chatted through."""
        deadline = time.monotonic() + wait_s
        while len(self.statuses) < at_least and time.monotonic() < deadline:
            time.sleep(0.2)
        self._stop.set()
        self._thread.join(timeout=90)
        return self.statuses


def _rotate(deployed: Deployed, tmp: Path, keys: dict[str, str]) -> None:
    """What a rotation step is for the team: the catalog names the tenant's keys, the stack
    holds their values; `up` writes both (here a copy of the test catalog)."""
    catalog = yaml.safe_load(CATALOG.read_text())
    catalog["tenants"][0]["api_keys"] = [{"name": name} for name in keys]
    path = tmp / f"catalog-{'-'.join(keys)}.yaml"
    path.write_text(yaml.safe_dump(catalog))
    stack = deployed.stack
    stack.set_config("radixfleet:catalog", auto.ConfigValue(str(path)))
    stack.set_config("radixfleet:tenantKeys",
                     auto.ConfigValue(json.dumps({TENANT: keys}), secret=True))  # fmt: skip
    result = stack.up(on_output=deployed.output.append, color="never")
    assert result.summary.result == "succeeded", "".join(deployed.output[-50:])


def test_a_key_added_and_one_removed_through_the_stack_rotate_with_traffic_flowing(
    deployed: Deployed, tmp_path: Path
) -> None:
    """Rotation without a cutover, in every region at once: a key added to the stack works
    after `up` while the old one goes on working; the old one removed, it is refused. A client
    chatting with the new key all the while is never refused and never fails."""
    cluster, url = deployed.cluster, _entry_url(deployed.cluster)
    secret = api_keys_secret(load_catalog(CATALOG).tenant(TENANT))
    uid = get(cluster, "secret", secret, "-n", NAMESPACE)["metadata"]["uid"]
    _until_answered(url, FIRST_KEY, 200)
    old_keys_client = _Chatter(url, FIRST_KEY)
    _rotate(deployed, tmp_path, {"api-key": FIRST_KEY, "next": NEXT_KEY})
    _until_answered(url, NEXT_KEY, 200)
    statuses = old_keys_client.stop()
    assert len(statuses) >= 5 and set(statuses) == {200}, old_keys_client.failures or statuses
    new_keys_client = _Chatter(url, NEXT_KEY)
    _rotate(deployed, tmp_path, {"next": NEXT_KEY})
    _, body = _until_answered(url, FIRST_KEY, 401)
    assert json.loads(body)["error"]["code"] == "invalid_api_key", body
    statuses = new_keys_client.stop()
    assert len(statuses) >= 5 and set(statuses) == {200}, new_keys_client.failures or statuses
    # Updated in place by both `up`s: replaced, it was deleted first, and missing for a moment.
    assert get(cluster, "secret", secret, "-n", NAMESPACE)["metadata"]["uid"] == uid


def test_kubectl_cannot_take_over_what_pulumi_made(deployed: Deployed) -> None:
    """One owner per fleet, held by the API server: Pulumi applies server-side, so the fields
    `up` set are its field manager's, and a `kubectl apply --server-side` (the README's
    rollout command) that would change one stops with a conflict naming that manager and
    changes nothing."""
    cluster = deployed.cluster
    found = cluster.kubectl("get", "isvc", MODEL, "-n", NAMESPACE, "-o", "json",
                            "--show-managed-fields")  # fmt: skip
    isvc = json.loads(found.stdout)
    appliers = {f["manager"] for f in isvc["metadata"]["managedFields"]
                if f["operation"] == "Apply"}  # fmt: skip
    pulumis = {manager for manager in appliers if "pulumi" in manager}
    assert pulumis, appliers
    floor = isvc["spec"]["predictor"]["minReplicas"]
    theirs = {"apiVersion": isvc["apiVersion"], "kind": isvc["kind"],
              "metadata": {"name": MODEL, "namespace": NAMESPACE},
              "spec": {"predictor": {"minReplicas": floor + 1}}}  # fmt: skip
    refused = cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(theirs),
                              check=False)  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    assert "conflict" in refused.stderr.lower(), refused.stderr
    assert any(manager in refused.stderr for manager in pulumis), refused.stderr
    assert get(cluster, "isvc", MODEL, "-n", NAMESPACE)["spec"]["predictor"]["minReplicas"] == floor


def test_the_quotas_gpu_budget_holds_on_the_fleet(deployed: Deployed) -> None:
    """`up` installed the quota's admission policy (after the Tenant CRD, before the tenant's
    models, which waited for the quota to count their tenant): a second copy of the model with
    3 replicas of 1 GPU, beside the first (1 GPU), does not fit the tenant's 2."""
    cluster = deployed.cluster
    isvc = get(cluster, "isvc", MODEL, "-n", NAMESPACE)
    wider = {"apiVersion": isvc["apiVersion"], "kind": isvc["kind"],
             "metadata": {"name": f"{MODEL}-wider", "namespace": NAMESPACE,
                          "annotations": isvc["metadata"]["annotations"]},
             "spec": {"predictor": {**isvc["spec"]["predictor"], "maxReplicas": 3}}}  # fmt: skip
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(wider),
                              check=False)  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    assert "inferenceservice-gpu-budget.radixfleet.io" in refused.stderr, refused.stderr
    assert "H100 budget exceeded" in refused.stderr, refused.stderr


def test_prometheus_scrapes_what_the_program_monitors_and_loaded_its_rules(
    deployed: Deployed,
) -> None:
    """The stack's monitoring (its default) on a cluster with prometheus-operator: the
    PodMonitors `up` made have Prometheus scrape both operator replicas, and the rule groups of
    the PrometheusRules it made are loaded (Prometheus refuses a file with one bad rule)."""
    cluster = deployed.cluster
    job = f"{operator.NAMESPACE}/{operator.NAME}"
    session.wait_for(
        lambda: bool(session.prometheus_query(cluster, f'count(up{{job="{job}"}} == 1) == 2')),
        timeout_s=TIMEOUT_S, what=f"Prometheus scraping both replicas of {job}",
    )  # fmt: skip
    made = prometheus_rules(REPO / "dashboards")  # as the program reads its dashboards_dir
    wanted = {group["name"] for rule in made for group in rule["spec"]["groups"]}
    loaded: set[str] = set()

    def all_loaded() -> bool:
        groups = session.prometheus_api(cluster, "rules")["groups"]
        loaded.update(group["name"] for group in groups)
        return wanted <= loaded

    session.wait_for(all_loaded, timeout_s=TIMEOUT_S, what=f"rule groups {sorted(wanted)}")
    assert wanted, "the program's rules name no group"


def test_a_second_up_changes_nothing(deployed: Deployed) -> None:
    again = deployed.stack.up(on_output=deployed.output.append, color="never")
    assert pulumi_stack.changes(again.summary) == {}, "".join(deployed.output[-50:])


def test_destroy_leaves_nothing_of_ours(deployed: Deployed) -> None:
    cluster = deployed.cluster
    deployed.stack.destroy(on_output=deployed.output.append, color="never")
    ours = f"{labels.MANAGED_BY}={labels.MANAGER}"
    left = cluster.kubectl(
        "get", "namespaces,clusterroles,clusterrolebindings,crd,clusterservingruntimes,"
        "validatingadmissionpolicies,validatingadmissionpolicybindings,podmonitors,"
        "prometheusrules,configmaps", "-A", "-l", ours, "-o", "name", check=False,
    )  # fmt: skip
    assert left.stdout.strip() == "", left.stdout
    gone = cluster.kubectl("get", "namespace", NAMESPACE, operator.NAMESPACE, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout
