"""Pre-warming in a cluster: which pods leave their router's selection and come back
(`prewarm.gate`, pure), and the warm-up itself (`warming.Warmer`) against a real emulated
replica (SGLang's `/server_info`, `/generate` and `--api-key`) and the region entry's real
hot-prefix route. The pods' labels are an in-memory stand-in for the API server here;
tests/cluster/test_prewarm.py runs it on the test cluster's kubelet, Knative and smg."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from radixfleet import dataplane, labels
from radixfleet.controllers.autoscale.kube import HttpWarmUp
from radixfleet.controllers.autoscale.prewarm import (
    NOT_FOR_PD_ROLES,
    Gate,
    PodView,
    gate,
    may_hold_back,
)
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec, Prewarm
from radixfleet.controllers.autoscale.state import Observed, ReplicaMetrics
from radixfleet.controllers.autoscale.warming import RELOOK_S, WARMED, Warmer, pod_view, waiting_of
from radixfleet.dataplane.prefixes import HotPrefixes
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.profile import ReplicaProfile
from radixfleet.twin.interfaces import Waiting

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SPEC = Prewarm()  # 30 s deadline
QUIET = Waiting(held=0, queued=0)
KEY = "data-plane-key-of-the-test"
SYSTEM = "You answer questions about the radixfleet platform, briefly and exactly. " * 16


def serving(name: str, ready_for: float | None = 120.0) -> PodView:
    return PodView(name, labels.SERVING_POOL, ready_for)


def warming(name: str, ready_for: float | None = None) -> PodView:
    return PodView(name, labels.WARMING_POOL, ready_for, warmed=False)


def role(name: str, ready_for: float | None, *, pool: str = labels.SERVING_POOL) -> PodView:
    """A pod of a prefill/decode pair's role."""
    return PodView(name, pool, ready_for, pd_role=True)


@pytest.mark.parametrize(
    ("pods", "waiting", "expected"),
    [
        pytest.param([serving("a"), serving("new", None)], QUIET, Gate(hold=("new",)),
                     id="a-new-pod-beside-a-serving-one-is-held"),
        pytest.param([serving("new", None)], QUIET, Gate(),
                     id="the-only-pod-is-never-held"),
        pytest.param([serving("a"), serving("new", None)], None, Gate(),
                     id="no-metrics-yet-holds-nothing"),
        pytest.param([serving("a"), PodView("new", "", None)], QUIET, Gate(),
                     id="a-revision-made-before-the-pool-label-is-never-gated"),
        pytest.param([serving("a"), PodView("new", labels.SERVING_POOL, None, warmed=True)],
                     QUIET, Gate(), id="a-pod-warmed-once-is-not-held-again"),
        pytest.param([serving("a"), warming("new")], QUIET, Gate(),
                     id="held-and-not-ready-waits"),
        pytest.param([serving("a"), warming("new", 1.0)], QUIET, Gate(warm=("new",)),
                     id="held-and-ready-is-warmed"),
        pytest.param([serving("a"), warming("new", 31.0)], QUIET,
                     Gate(release=(("new", "deadline: ready for 31 s"),)),
                     id="past-the-deadline-is-released"),
        pytest.param([serving("a"), warming("new", 1.0)], Waiting(held=1, queued=0),
                     Gate(release=(("new", "needed: another request would wait for it"),)),
                     id="a-request-held-for-a-replica-releases-it"),
        pytest.param([serving("a"), warming("new", 1.0)], Waiting(held=0, queued=3),
                     Gate(release=(("new", "needed: another request would wait for it"),)),
                     id="a-backlog-past-the-allowance-releases-it"),
        pytest.param([warming("new", 1.0)], QUIET,
                     Gate(release=(("new", "needed: another request would wait for it"),)),
                     id="no-other-pod-serves-releases-it"),
        pytest.param([role("a", 120.0), role("new", None)], QUIET, Gate(),
                     id="a-new-prefill-or-decode-pod-is-never-held"),
        pytest.param([role("a", 120.0), role("new", 1.0, pool=labels.WARMING_POOL)], QUIET,
                     Gate(release=(("new", NOT_FOR_PD_ROLES),)),
                     id="a-held-prefill-or-decode-pod-is-released-unwarmed"),
    ],
)  # fmt: skip
def test_gate(pods: list[PodView], waiting: Waiting | None, expected: Gate) -> None:
    assert gate(pods, waiting=waiting, spec=SPEC, allowance=2) == expected


def test_a_warm_up_under_way_is_not_started_twice() -> None:
    pods = [serving("a"), warming("new", 1.0)]
    assert gate(pods, waiting=QUIET, spec=SPEC, allowance=2, warming_now=frozenset({"new"})) == (
        Gate()
    )


def test_pre_warming_switched_off_holds_nothing_and_releases_what_it_held() -> None:
    off = Prewarm(enabled=False)
    pods = [serving("a"), serving("b", None), warming("c", 1.0)]
    assert gate(pods, waiting=QUIET, spec=off, allowance=2) == Gate(
        release=(("c", "needed: another request would wait for it"),)
    )


pool_views = st.builds(
    PodView,
    name=st.sampled_from("abcdefgh"),
    pool=st.sampled_from([labels.SERVING_POOL, labels.WARMING_POOL, ""]),
    ready_for_s=st.none() | st.floats(0, 100),
    warmed=st.booleans(),
)
waits = st.none() | st.builds(Waiting, held=st.integers(0, 3), queued=st.integers(0, 20))


@given(st.lists(pool_views, max_size=8, unique_by=lambda p: p.name), waits)
def test_warm_up_never_delays_a_request_it_could_serve(
    pods: list[PodView], waiting: Waiting | None
) -> None:
    """Whenever a request would wait for another replica (or that is not known), no pod is
    taken out and every pod that was is put back; each pod gets at most one action."""
    decided = gate(pods, waiting=waiting, spec=SPEC, allowance=2)
    serving_now = sum(
        1 for p in pods if p.pool == labels.SERVING_POOL and p.ready_for_s is not None
    )
    if waiting is None or not may_hold_back(serving=serving_now, waiting=waiting, allowance=2):
        assert decided.hold == () and decided.warm == ()
        assert {name for name, _ in decided.release} == {
            p.name for p in pods if p.pool == labels.WARMING_POOL
        }
    acted = [*decided.hold, *decided.warm, *(name for name, _ in decided.release)]
    assert len(acted) == len(set(acted))
    assert not set(decided.hold) & {p.name for p in pods if p.ready_for_s is not None or p.warmed}


# ---- the Kubernetes objects as the Warmer reads them ---------------------------------------


def pod(
    name: str, pool: str, *, ready_since: datetime | None = None, ip: str = "127.0.0.1",
    note: str | None = None, key_name: str = dataplane.KEY,
) -> dict[str, Any]:  # fmt: skip
    """A revision's pod; `key_name`: the key of the data plane's Secret it started with."""
    conditions = []
    if ready_since is not None:
        since = ready_since.isoformat().replace("+00:00", "Z")
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": since})
    return {
        "metadata": {"name": name, "labels": {labels.POOL: pool},
                     "annotations": {WARMED: note} if note is not None else {}},
        "spec": {"containers": [{"name": "kserve-container",
                                 "env": [dataplane.env_var(key_name)]}]},
        "status": {"podIP": ip, "conditions": conditions},
    }  # fmt: skip


def test_a_pod_is_read_with_its_pool_how_long_it_has_been_ready_and_whether_warmed() -> None:
    view = pod_view(pod("p", labels.WARMING_POOL, ready_since=NOW - timedelta(seconds=7)), NOW)
    assert view == PodView("p", labels.WARMING_POOL, 7.0, warmed=False)
    assert pod_view(pod("q", labels.SERVING_POOL, note="3 of 3"), NOW).warmed
    assert pod_view(pod("q", labels.SERVING_POOL), NOW).ready_for_s is None
    prefill = pod("r", labels.SERVING_POOL)
    prefill["metadata"]["labels"][labels.PD_ROLE] = "prefill"
    assert pod_view(prefill, NOW).pd_role and not pod_view(pod("q", "serving"), NOW).pd_role


def test_the_queue_counted_is_the_serving_pods_only() -> None:
    pods = [pod("a", labels.SERVING_POOL), pod("w", labels.WARMING_POOL)]
    metrics = (ReplicaMetrics("a", running=4, queued=1.5, kv_usage=0.2),
               ReplicaMetrics("w", running=0, queued=9, kv_usage=0.0))  # fmt: skip
    observed = Observed(ready=2, replicas=metrics, waiting=None)
    assert waiting_of(observed, pods) == Waiting(held=0, queued=2)
    assert waiting_of(Observed(ready=0, metrics_error="no series"), pods) is None
    assert waiting_of(None, pods) is None


@dataclass
class MemoryPods:
    """The revision's pods as the API server would hold them; `set_pool` patches them."""

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    changes: list[tuple[str, str, str | None]] = field(default_factory=list)
    lists: int = 0

    def of_revision(self, namespace: str, revision: str) -> list[dict[str, Any]]:
        self.lists += 1
        return [json.loads(json.dumps(p)) for p in self.pods.values()]

    def set_pool(self, namespace: str, name: str, pool: str, note: str | None = None) -> None:
        meta = self.pods[name]["metadata"]
        meta["labels"][labels.POOL] = pool
        if note is not None:
            meta["annotations"][WARMED] = note
        self.changes.append((name, pool, note))


@dataclass
class SecretKeys:
    """The namespace's data-plane Secret: its keys by name."""

    values: dict[str, str] = field(default_factory=lambda: {dataplane.KEY: KEY})

    def key(self, namespace: str, name: str = dataplane.KEY) -> str | None:
        return self.values.get(name)


@contextmanager
def entry_prefixes(hot: HotPrefixes) -> Iterator[str]:
    """The entry's hot-prefix route, served on a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    hot.install(app)
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    try:
        port = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _cached_tokens(url: str, text: str) -> int:
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 1}}).encode()
    request = urllib.request.Request(f"{url}/generate", data=body, headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.load(answer)["meta_info"]["cached_tokens"])


def _policy() -> AutoscalePolicySpec:
    return AutoscalePolicySpec(inference_service="chat")


QUIET_FLEET = Observed(ready=1, replicas=(ReplicaMetrics("a", 1, 0, 0.1),), waiting=0)


@pytest.mark.parametrize(
    ("held", "secret"),
    [
        pytest.param(dataplane.KEY, {dataplane.KEY: KEY}, id="the-one-key"),
        # A rotation: the Secret holds the old and the new; the new pod started with the new.
        pytest.param(
            "api-key-2", {dataplane.KEY: "the-old-key", "api-key-2": KEY}, id="a-rotations-new-key"
        ),
    ],
)
def test_a_new_pod_is_held_warmed_with_the_hot_prefixes_and_put_back(
    tokenizer: EmulatorTokenizer, held: str, secret: dict[str, str]
) -> None:
    profile = ReplicaProfile().scaled(time_factor=0.01)
    config = EmulatorConfig(profile=profile, port=0, warm=True, served_model_name="chat",
                            api_key=KEY)  # fmt: skip
    hot = HotPrefixes(keys_of=lambda namespace: list(secret.values()) if namespace == "team-a"
                      else [])  # fmt: skip
    for i in range(4):
        hot.record("team-a", "chat", {"text": f"{SYSTEM}Question {i}: what is a revision?"})
    pods = MemoryPods({"a": pod("a", labels.SERVING_POOL, ready_since=NOW),
                       "new": pod("new", labels.SERVING_POOL, key_name=held)})  # fmt: skip
    with serve_in_thread(config, tokenizer=tokenizer) as replica, entry_prefixes(hot) as entry:
        keys = SecretKeys(secret)
        warmer = Warmer(pods=pods, keys=keys, http=HttpWarmUp(entry), pod_port=replica.port)
        warmer.tick("team-a", _policy(), "chat-00001", QUIET_FLEET, now=NOW)
        assert pods.changes == [("new", labels.WARMING_POOL, None)]  # out before it is ready
        pods.pods["new"]["status"]["conditions"] = pod("x", "", ready_since=NOW)["status"][
            "conditions"
        ]
        warmer.tick("team-a", _policy(), "chat-00001", QUIET_FLEET, now=NOW)
        for job in list(warmer.running.values()):
            job.result(timeout=60)
        name, pool, note = pods.changes[-1]
        assert (name, pool) == ("new", labels.SERVING_POOL)
        assert note is not None and note.startswith("1 of 1 prefixes in")
        # its cache holds the system prompt: a new question is served mostly from it
        cached = _cached_tokens(replica.url, f"{SYSTEM}Question 9: what is a router?")
        assert cached >= 0.8 * len(tokenizer.encode(SYSTEM))


@pytest.mark.parametrize(
    ("key", "note"),
    [
        pytest.param(KEY, "not warmed: ", id="nothing-answers"),  # the discard port
        pytest.param(None, "not warmed: no data-plane key 'api-key'", id="no-data-plane-key"),
    ],
)
def test_a_warm_up_that_cannot_happen_puts_the_pod_back_cold_and_says_why(
    key: str | None, note: str
) -> None:
    pods = MemoryPods({"a": pod("a", labels.SERVING_POOL, ready_since=NOW),
                       "new": pod("new", labels.WARMING_POOL, ready_since=NOW)})  # fmt: skip
    closed = HttpWarmUp("http://127.0.0.1:9", timeout_s=2)
    warmer = Warmer(pods=pods, keys=SecretKeys({dataplane.KEY: key} if key else {}), http=closed,
                    pod_port=9)  # fmt: skip
    warmer.tick("team-a", _policy(), "chat-00001", QUIET_FLEET, now=NOW)
    for job in list(warmer.running.values()):
        job.result(timeout=60)
    name, pool, said = pods.changes[-1]
    assert (name, pool) == ("new", labels.SERVING_POOL)
    assert said is not None and said.startswith(note)
    if key is None:
        assert said == note


def test_a_settled_revision_is_listed_again_only_when_a_pod_may_have_come() -> None:
    """At a timer call a second per policy, pods are listed when the last look found something
    to do, the autoscaler asked for more replicas than are ready or saw one starting, or a
    minute has passed; a new pod the autoscaler asked for is still held back before it is
    ready."""
    pods = MemoryPods({"a": pod("a", labels.SERVING_POOL, ready_since=NOW)})
    clock = [0.0]
    warmer = Warmer(pods=pods, keys=SecretKeys(), http=HttpWarmUp("http://127.0.0.1:9"),
                    clock=lambda: clock[0])  # fmt: skip

    def tick(observed: Observed = QUIET_FLEET, desired: int = 1) -> int:
        before = pods.lists
        warmer.tick("team-a", _policy(), "chat-00001", observed, now=NOW, desired=desired)
        return pods.lists - before

    assert [tick() for _ in range(3)] == [1, 0, 0]  # settled after the first look
    assert tick(Observed(ready=1, starting=1, replicas=QUIET_FLEET.replicas, waiting=0)) == 1
    assert tick() == 0
    clock[0] = RELOOK_S
    assert tick() == 1  # a minute on: looked at again
    pods.pods["new"] = pod("new", labels.SERVING_POOL)  # the autoscaler asked for a second
    assert tick(desired=2) == 1
    assert pods.changes == [("new", labels.WARMING_POOL, None)]  # held back before it is ready
    assert tick() == 1  # not settled while a pod is not ready: looked at every call
