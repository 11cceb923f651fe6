"""`make demo-cluster` (`python -m testbed demo`): `radixfleet demo` on the test cluster instead
of local processes.

The same workload as `radixfleet demo` (the same traces, seed and scaling) goes through the
region entry of a real one-node Kubernetes (this test bed: KServe, Knative, radixfleet's image),
deployed from radixfleet's own kustomize bases as a platform team deploys them:

- the operator (`deploy/operator/`, two replicas, one leading) with its routers controller;
- the region entry (`deploy/entry/`, two replicas) in front of an smg router per revision;
- Prometheus, configured from `deploy/monitoring/`'s PodMonitors (the canary's judge);
- one tenant, `demo`, whose two models are emulated SGLang predictors from radixfleet's
  image: `llama-3-1-70b` (a sixth of the workload) scales to zero and is woken by the replay's
  first request for it; `llama-3-1-8b` (the rest) gets a new version when the replay starts,
  stepped and judged by the operator while the replay's traffic flows through the entry (the
  busier model, so that a minute of replay gives the canary enough requests to judge).

The cluster is one region, so every request of the workload goes to its entry. The summary is
the local demo's (`summary.json`, `report.html`, the table) plus `cluster`: what ran where, the
model that woke from zero and how long its first answer took, and the canary's outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from rich.console import Console

from radixfleet import __version__
from radixfleet.demo.report import Wake, print_table, write_report, write_summary
from radixfleet.demo.run import DemoOptions, failed_requests, time_scale_note
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet.spec import LocalFleetSpec, demo_spec
from radixfleet.localfleet.workloads import demo_workload
from radixfleet.render import entry as entry_base
from radixfleet.render import operator
from radixfleet.workload.records import RequestResult
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import breakdown
from testbed import images, session
from testbed.cluster import Cluster
from testbed.deploy import apply_pod_monitors, install_platform, operator_leader, remove_operator
from testbed.emulated import emulated_isvc, get, model_volume, predictor_status, ready
from testbed.tenants import TenantSpec, onboard

REGION = "cluster"
# A tenant and namespace of the demo's own: the catalog's (team-search) are the cluster tests'.
TENANT = "demo"
NAMESPACE = "radixfleet-demo"
WAKES = "llama-3-1-70b"  # at zero when the replay starts
CANARY = "llama-3-1-8b"  # rolled out to a second version during the replay
# One judged step at half the traffic: about 1.5 requests a second reach the canary, so each
# 10 s interval has the requests it needs.
POLICY = {"steps": [50], "intervalSeconds": 10, "minRequests": 5}
READY_S = 300.0
# After the replay, how long the canary may take to finish (its traffic has stopped by then).
CANARY_GRACE_S = 30.0
# Knative's shortest window: a model scales to zero about 40 s after its last request.
FAST_SCALE_DOWN = {"autoscaling.knative.dev/window": "6s"}
# What a fleet's failover would show this region's entry (infra generates the real one).
FLEET_TOKEN = secrets.token_urlsafe(32)


@dataclasses.dataclass
class ClusterRun:
    """What the cluster demo saw, for the summary."""

    results: list[RequestResult] = dataclasses.field(default_factory=list)
    steps_s: dict[str, float] = dataclasses.field(default_factory=dict)
    canary: dict[str, Any] = dataclasses.field(default_factory=dict)
    pods: list[dict[str, str]] = dataclasses.field(default_factory=list)
    failover_view: dict[str, Any] = dataclasses.field(default_factory=dict)
    entry_warnings: list[str] = dataclasses.field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str, console: Console) -> Iterator[None]:
        began = time.monotonic()
        with console.status(name.replace("_", " ")):
            yield
        self.steps_s[name] = round(time.monotonic() - began, 1)
        console.print(f"{name.replace('_', ' ')}: {self.steps_s[name]:.0f} s")


def cluster_demo_spec() -> LocalFleetSpec:
    """The local demo's fleet cut to the models this demo deploys (the 8B it rolls out and the
    70B it wakes): the P/D pair and the LoRA model have cluster tests of their own
    (tests/cluster/test_pd_pair.py, tests/cluster/test_lora.py), and a request to a model not
    deployed here would be a 404."""
    spec = demo_spec()
    regions = [region.model_copy(update={"models": [m for m in region.models
                                                    if m.name in (CANARY, WAKES)]})
               for region in spec.regions]  # fmt: skip
    return spec.model_copy(update={"regions": regions})


def run_cluster_demo(
    options: DemoOptions, *, console: Console, cluster: Cluster | None = None
) -> dict[str, Any]:
    """Run the demo on `cluster` (a running test cluster with KServe), or on one started and
    stopped here; return the summary (also written to `options.out`)."""
    started, run = time.monotonic(), ClusterRun()
    tokenizer = load_tokenizer(options.cache_dir)
    workload = demo_workload(
        spec=cluster_demo_spec(), tokenizer=tokenizer, duration_s=options.duration_s,
        rate=options.rate, token_scale=options.token_scale, seed=options.seed,
        traces_dir=options.traces_dir,
    )  # fmt: skip
    items = [dataclasses.replace(item, region=REGION) for item in workload.items]
    console.print(f"workload: {len(items)} requests over {options.duration_s:g} s")
    with _running(cluster, run, console) as running:
        try:
            url, key = _deploy(running, options.out, run, console)
            run.results = _replay_with_rollout(running, url, key, items, run, console)
            run.pods = _placement(running)
            run.failover_view = failover_view(url, FLEET_TOKEN)
        finally:
            run.entry_warnings = entry_warnings(running)  # before its pods go
            _undeploy(running)
    summary = _summary(options, workload.description, run, started)
    write_summary(options.out, summary)
    write_report(options.out, summary=summary, results=run.results, wakes=_wakes(run))
    print_table(console, summary)
    console.print(f"wrote {options.out / 'summary.json'} and {options.out / 'report.html'}")
    return summary


@contextlib.contextmanager
def _running(cluster: Cluster | None, run: ClusterRun, console: Console) -> Iterator[Cluster]:
    """The given cluster, or a fresh one with KServe and Knative, stopped afterwards."""
    if cluster is not None:
        yield cluster
        return

    run_dir = Path("/var/tmp") / f"radixfleet-demo-{int(time.time())}"
    with run.step("cluster_start", console):
        started = session.start(run_dir)
    failed = True
    try:
        with run.step("kserve_install", console):
            session.install_radixfleet_crds(started)
            session.install_platform(started)
        with session.kingresses_marked_ready(started):
            yield started
        failed = False
    finally:
        with run.step("cluster_stop", console):
            session.stop(started)
        if failed:
            console.print(f"the cluster's logs are kept in {started.layout.logs}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


def _deploy(cluster: Cluster, out: Path, run: ClusterRun, console: Console) -> tuple[str, str]:
    """Everything up and Ready, the waking model at zero; the entry's URL and the tenant's key."""
    with run.step("images", console):  # built here when their inputs changed, then loaded
        image, smg = images.radixfleet(), images.smg()
        session.load_images(cluster, [image, smg])
    key = f"sk-demo-{secrets.token_hex(12)}"
    with run.step("platform_deploy", console):
        # The fleet token before the entry starts: it relays this region's Prometheus to its
        # holders.
        install_platform(cluster, out / "overlays", image, smg,
                         before_entry=[fleet_token_secret(FLEET_TOKEN)])  # fmt: skip
        apply_pod_monitors(cluster)  # for the platform's Prometheus
        _tenant(cluster, key, image.pinned)
    with run.step("models_ready", console):
        for model in (WAKES, CANARY):
            _wait_ready(cluster, model)
        session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)
    with run.step("scale_to_zero", console):
        session.wait_for(lambda: not _pods_of(cluster, WAKES), timeout_s=READY_S,
                         what=f"{NAMESPACE}/{WAKES} at zero")  # fmt: skip
    service = get(cluster, "service", entry_base.NAME, "-n", operator.NAMESPACE)
    return f"http://{service['spec']['clusterIP']}", key


def _wait_ready(cluster: Cluster, model: str) -> None:
    session.wait_for(lambda: ready(cluster, "isvc", model, NAMESPACE), timeout_s=READY_S,
                     what=f"{NAMESPACE}/{model} Ready")  # fmt: skip


def fleet_token_secret(token: str) -> dict[str, Any]:
    """The Secret `infra/` declares in every region (the base's entry reads it if it exists)."""
    meta = {"name": operator.FLEET_TOKEN_SECRET, "namespace": operator.NAMESPACE}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta,
            "stringData": {operator.FLEET_TOKEN_KEY: token}}  # fmt: skip


def failover_view(url: str, token: str) -> dict[str, Any]:
    """This region as the fleet's failover sees it: its Prometheus read through the entry with
    the fleet token (radixfleet/dataplane/signals.py), and what the entry says without it."""
    from radixfleet.adapters.prometheus import NO_RETRY, HttpPrometheus
    from radixfleet.controllers.failover.observe import region_signals
    from radixfleet.controllers.failover.queries import QueryConfig, region_queries
    from radixfleet.dataplane.signals import PREFIX, QUERY_PATH

    config = QueryConfig()
    queries = region_queries(namespaces=[NAMESPACE], models=[WAKES, CANARY],
                             window_seconds=300, slo_seconds=2.0, config=config)  # fmt: skip
    auth = {"Authorization": f"Bearer {token}"}
    client = HttpPrometheus(url + PREFIX, retry=NO_RETRY, headers=auth)
    signals = region_signals(client, queries, at=datetime.now(UTC), config=config)
    refused = requests.get(url + QUERY_PATH, params={"query": "up"}, timeout=10)
    view = {k: round(v, 3) if isinstance(v, float) else v
            for k, v in dataclasses.asdict(signals).items()}  # fmt: skip
    return {**view, "without_token_status": refused.status_code}


def _tenant(cluster: Cluster, key: str, image: str) -> None:
    policy = {"apiVersion": "radixfleet.io/v1alpha1", "kind": "CanaryPolicy",
              "metadata": {"name": "default", "namespace": NAMESPACE}, "spec": POLICY}  # fmt: skip
    tenant = TenantSpec(TENANT, namespace=NAMESPACE, key=key, gpus=4, tokens_per_minute=None)
    onboard(cluster, tenant, extra=[policy])
    volumes = [v for m in (WAKES, CANARY) for v in model_volume(cluster, namespace=NAMESPACE,
                                                               model=m)]  # fmt: skip
    session.apply(cluster, [*_unique(volumes), _model(image, WAKES, version="1"),
                            _model(image, CANARY, version="1")])  # fmt: skip


def _unique(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        seen.setdefault((obj["kind"], obj["metadata"]["name"]), obj)
    return list(seen.values())


def _model(image: str, name: str, *, version: str) -> dict[str, Any]:
    """A model of the tenant; the waking one may go to zero, the canary one keeps a replica."""
    waking = name == WAKES
    isvc = emulated_isvc(
        image, name=name, namespace=NAMESPACE, mode="Knative", min_replicas=0 if waking else 1,
        max_replicas=2, env={"MODEL_VERSION": version}, labels={"radixfleet.io/tenant": TENANT},
        annotations={"radixfleet.io/gpu-type": "H100", "radixfleet.io/gpus-per-replica": "1",
                     "radixfleet.io/canary-policy": "default",
                     **(FAST_SCALE_DOWN if waking else {})},
    )  # fmt: skip
    isvc["spec"]["predictor"]["canaryTrafficPercent"] = 0  # the operator moves it from there
    return isvc


def _replay_with_rollout(
    cluster: Cluster, url: str, key: str, items: list[Any], run: ClusterRun, console: Console
) -> list[RequestResult]:
    """The replay through the entry, with the canary's new version applied as it starts."""
    session.apply(cluster, [_model(images.radixfleet().pinned, CANARY, version="2")])
    began = time.monotonic()
    replayer = Replayer(entries={REGION: url}, console=console,
                        headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    results = asyncio.run(replayer.run(items))
    run.steps_s["replay"] = round(time.monotonic() - began, 1)
    with run.step("canary_outcome", console):
        deadline = time.monotonic() + CANARY_GRACE_S
        while time.monotonic() < deadline and not _rollout_ended(cluster):
            time.sleep(1.0)
        run.canary = _rollout(cluster)
        run.canary["seconds_since_applied"] = round(time.monotonic() - began, 1)
        run.canary["traffic"] = predictor_status(cluster, CANARY, NAMESPACE).get("traffic", [])
    return results


def _rollout(cluster: Cluster) -> dict[str, Any]:
    policy = get(cluster, "canarypolicy", "default", "-n", NAMESPACE)
    for entry in (policy.get("status") or {}).get("rollouts", []):
        if entry.get("inferenceService") == CANARY:
            return dict(entry)
    return {"phase": "NotStarted"}


def _rollout_ended(cluster: Cluster) -> bool:
    return _rollout(cluster).get("phase") in ("Promoted", "RolledBack")


def _pods_of(cluster: Cluster, model: str) -> list[dict[str, Any]]:
    found = get(
        cluster, "pods", "-n", NAMESPACE, "-l", f"serving.kserve.io/inferenceservice={model}"
    )
    return [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]


def _placement(cluster: Cluster) -> list[dict[str, str]]:
    """The demo's pods (operator, entry, routers, predictors): role, node and phase."""
    pods = [
        p for ns in (operator.NAMESPACE, NAMESPACE) for p in get(cluster, "pods", "-n", ns)["items"]
    ]
    leader = operator_leader(cluster)
    found = []
    for pod in pods:
        role = _role(pod, leader=leader)
        if role:
            found.append({"role": role, "namespace": pod["metadata"]["namespace"],
                          "pod": pod["metadata"]["name"], "node": pod["spec"].get("nodeName", ""),
                          "phase": pod["status"].get("phase", "")})  # fmt: skip
    return sorted(found, key=lambda p: (p["role"], p["pod"]))


def _role(pod: dict[str, Any], *, leader: str | None) -> str:
    labels = pod["metadata"].get("labels") or {}
    if labels.get("app.kubernetes.io/name") == operator.NAME:
        return "operator (leader)" if pod["metadata"]["name"] == leader else "operator"
    if labels.get("app.kubernetes.io/name") == entry_base.NAME:
        return "entry"
    if labels.get("app.kubernetes.io/component") == "router":
        return f"router of {labels.get('radixfleet.io/revision', '?')}"
    if "serving.knative.dev/revision" in labels:
        return f"predictor of {labels['serving.knative.dev/revision']}"
    return ""


def entry_warnings(cluster: Cluster) -> list[str]:
    """What the entry's replicas logged at WARNING or above during the run, each line prefixed
    with its pod: why a request failed or was sent again, which the client's 502 does not say."""
    selector = ",".join(f"{k}={v}" for k, v in entry_base.SELECTOR.items())
    logs = cluster.kubectl("logs", "-n", operator.NAMESPACE, "-l", selector, "--prefix",
                           "--tail=-1", "--max-log-requests=10", check=False)  # fmt: skip
    # `--prefix` lines read `[pod/NAME/entry] LEVEL logger: message` (radixfleet/entry/main.py).
    return [line for line in logs.stdout.splitlines()
            if "] WARNING " in line or "] ERROR " in line]  # fmt: skip


def _undeploy(cluster: Cluster) -> None:
    """Leave a shared cluster as found (the tests reuse theirs): cluster-wide objects first."""
    cluster.kubectl("delete", "tenant", TENANT, "--wait=false", check=False)
    # Waited for: a namespace still terminating would refuse a next run's objects.
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=180s",
                    check=False)  # fmt: skip
    cluster.kubectl("delete", "deployment", entry_base.NAME, "-n", operator.NAMESPACE,
                    "--wait=false", check=False)  # fmt: skip
    cluster.kubectl("delete", "secret", operator.FLEET_TOKEN_SECRET, "-n", operator.NAMESPACE,
                    "--wait=false", check=False)  # fmt: skip
    remove_operator(cluster)


def _wakes(run: ClusterRun) -> list[Wake]:
    """The waking model's first answered request: it waited for the revision to come up."""
    first = min((r for r in run.results if r.model == WAKES and r.ok),
                key=lambda r: r.started, default=None)  # fmt: skip
    if first is None or first.first_token is None:
        return []
    return [Wake(REGION, WAKES, first.started, first.first_token - first.started)]


def _summary(options: DemoOptions, models: Any, run: ClusterRun, started: float) -> dict[str, Any]:
    spec = cluster_demo_spec()
    wakes = _wakes(run)
    return {
        "radixfleet_version": __version__,
        "demo": {
            "where": "cluster",
            "wall_time_s": round(time.monotonic() - started, 1),
            "steps_s": run.steps_s,
            "duration_s": options.duration_s,
            "rate": options.rate,
            "seed": options.seed,
            "token_scale": options.token_scale,
            "time_scale_note": time_scale_note(spec, options),
        },
        "workload": {"requests": len(run.results), "models": models},
        **breakdown(run.results),
        "wake_from_zero": [
            {"region": w.region, "model": w.model, "seconds": round(w.seconds, 2)} for w in wakes
        ],
        "failed_requests": failed_requests(run.results),
        "entry_warnings": run.entry_warnings,
        "cluster": {
            "pods": run.pods,
            "canary": {"model": CANARY, **run.canary},
            "failover_view": run.failover_view,
        },
        "notes": _notes(run, wakes),
    }


def _notes(run: ClusterRun, wakes: list[Wake]) -> list[str]:
    roles = sorted({p["role"].split(" of ")[0] for p in run.pods})
    notes = [
        "Where: a one-node Kubernetes built here (testbed/), one region; every request went "
        f"through the region entry's Service with the tenant's API key. Pods: {', '.join(roles)}.",
        f"Canary: {CANARY} version 2 applied as the replay started; the in-cluster operator, "
        f"judging from the cluster's Prometheus, left it {run.canary.get('phase')}.",
    ]
    view = run.failover_view
    if view:
        notes.append(
            "Failover's view of this region, read through its entry with the fleet token: "
            f"availability {view.get('availability')}, {view.get('requests')} requests in 5 "
            f"min, ready replicas {view.get('ready_replicas')}; without the token the entry "
            f"answered {view.get('without_token_status')}."
        )
    if wakes:
        waited = f"{wakes[0].seconds:.1f} s"
        notes.append(f"{WAKES} was at zero when the replay started; its first request was "
                     f"answered after {waited} (Knative's activator woke it).")  # fmt: skip
    return notes
