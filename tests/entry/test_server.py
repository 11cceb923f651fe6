"""The region entry's server against a real smg gateway (the PyPI binary) in front of an
emulated replica, and the quota's cluster gate on fakes of the Tenants and their Secrets.

What runs for real here: smg (routing, its `no_available_workers` answer, its `--api-key`), the
emulated replica (SGLang's `--api-key`), the entry and the token gate; the router and the replica
take only the data plane's key, as in a cluster. What stands in: Knative's Service of a revision
(its activator cannot run outside a cluster; tests/cluster/test_data_plane.py wakes a real one),
as a small server that records the headers it gets and answers like a replica.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from radixfleet import dataplane
from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.entry import ClusterGate, per_replica
from radixfleet.controllers.quota.fakes import FakeSecrets, FakeTenants
from radixfleet.dataplane.routes import Routes, Target, build_routes
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.entry.server import ClusterEntry, Upstreams, router_has_no_worker
from radixfleet.localfleet.procs import free_port, free_ports
from radixfleet.profile import ReplicaProfile
from tests import connection_faults

pytestmark = pytest.mark.fleet
SMG = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "smg"
KEYS = {"blue": "sk-blue", "green": "sk-green"}
REVISION = "chat-predictor-00001"
DATA_PLANE_KEY = "data-plane-key-of-the-test"


def _smg(
    port: int, metrics: int, workers: list[str], log: Path, *, tokenizer: Path | None = None,
    extra: list[str] | None = None,
) -> subprocess.Popen[bytes]:  # fmt: skip
    command = [
        str(SMG), "launch", "--host", "127.0.0.1", "--port", str(port),
        "--policy", "cache_aware", "--prometheus-port", str(metrics),
        "--log-level", "warn", "--api-key", DATA_PLANE_KEY,
        *(["--worker-urls", *workers] if workers else []),
        *(["--tokenizer-path", str(tokenizer)] if tokenizer else []),
        *(extra or []),
    ]  # fmt: skip
    with log.open("wb") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def _workers(url: str) -> int:
    try:
        request = urllib.request.Request(f"{url}/workers", headers=dataplane.bearer(DATA_PLANE_KEY))
        with urllib.request.urlopen(request, timeout=2) as answer:
            return sum(1 for w in json.loads(answer.read())["workers"] if w["is_healthy"])
    except OSError:
        return -1


@dataclass
class Gateways:
    serving: str  # smg with the emulated replica as its worker
    empty: str  # smg with no worker: a revision at zero
    replica: RunningEmulator


@pytest.fixture(scope="module")
def gateways(
    tokenizer: EmulatorTokenizer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateways]:
    profile = ReplicaProfile().scaled(time_factor=0.01)
    logs = tmp_path_factory.mktemp("smg")
    config = EmulatorConfig(profile=profile, port=0, warm=True, served_model_name="chat",
                            api_key=DATA_PLANE_KEY)  # fmt: skip
    with serve_in_thread(config, tokenizer=tokenizer) as replica:
        ports = free_ports(4)  # both gateways' HTTP and metrics listeners, all different
        # The serving revision's router holds the model's tokenizer, as a cluster's does when
        # its InferenceService names one; the empty one holds none.
        processes = [_smg(ports[0], ports[2], [replica.url], logs / "serving.log",
                          tokenizer=tokenizer.path),
                     _smg(ports[1], ports[3], [], logs / "empty.log")]  # fmt: skip
        ports = ports[:2]
        try:
            urls = [f"http://127.0.0.1:{p}" for p in ports]
            deadline = time.monotonic() + 60
            while (_workers(urls[0]), _workers(urls[1])) != (1, 0):
                assert all(p.poll() is None for p in processes), "smg exited"
                assert time.monotonic() < deadline, "smg did not come up"
                time.sleep(0.2)
            yield Gateways(urls[0], urls[1], replica)
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=15)


@dataclass
class KnativeStandIn:
    """A revision's Knative Service as the entry meets it: records the headers it gets."""

    seen: list[dict[str, str]] = field(default_factory=list)
    resets: int = 0  # the first `resets` requests get their connection reset

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        if len(self.seen) <= self.resets:
            return await _reset(request)
        body = await request.json()
        usage = {"prompt_tokens": 3, "completion_tokens": 1}
        choices = [{"index": 0, "message": {"content": "hi"}}]
        answer = {"object": "chat.completion", "model": body["model"], "choices": choices}
        return web.json_response({**answer, "usage": usage})


@dataclass
class LocalUpstreams(Upstreams):
    """Routers and Knative Services by namespace, on localhost."""

    routers: dict[str, str] = field(default_factory=dict)
    knative_url: str = ""

    def router(self, target: Target) -> str:
        return self.routers[target.namespace]

    def knative(self, target: Target) -> str:
        return self.knative_url


TENANTS = {"blue": 6_000_000, "green": 6_000_000, "red": 60}


def _gate() -> ClusterGate:
    tenants, secrets = FakeTenants(), FakeSecrets()
    for name, tokens in TENANTS.items():
        tenants.add({"metadata": {"name": name}, "spec": {
            "namespaces": [f"team-{name}"], "tokenBudget": {"tokensPerMinute": tokens},
            "apiKeys": [{"name": "keys", "namespace": f"team-{name}"}]}})  # fmt: skip
        secrets.keys[(f"team-{name}", "keys", "api-key")] = f"sk-{name}"
    return ClusterGate(tenants, secrets, replicas=2, region="test")


def _isvc(name: str, namespace: str, *, standard: bool = False) -> dict[str, Any]:
    if standard:  # KServe's raw Deployments: no revisions, no traffic split in its status
        return {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": CREATED,
                "annotations": {"serving.kserve.io/deploymentMode": "Standard"},
            }
        }
    traffic = [{"revisionName": REVISION, "percent": 100}]
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": CREATED},
            "status": {"components": {"predictor": {"traffic": traffic}}}}  # fmt: skip


CREATED = "2026-11-28T09:30:00Z"  # 1795858200 in Unix seconds


@asynccontextmanager
async def _entry(
    gateways: Gateways, *, connect_timeout_s: float | None = None, standard: bool = False
) -> AsyncIterator[tuple[str, KnativeStandIn, ClusterEntry]]:
    knative = KnativeStandIn()
    stand_in = web.Application()
    stand_in.add_routes([web.post("/v1/chat/completions", knative.chat)])
    closed = f"http://127.0.0.1:{free_port()}"  # a router with no pod yet
    timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout_s)
    async with (
        TestServer(stand_in) as knative_server,
        aiohttp.ClientSession(timeout=timeout) as session,
    ):
        upstreams = LocalUpstreams(
            routers={"team-blue": gateways.serving, "team-green": gateways.empty,
                     "team-red": closed},
            knative_url=str(knative_server.make_url("")).rstrip("/"),
        )  # fmt: skip
        gate = _gate()
        entry = ClusterEntry(gate=gate, session=session, upstreams=upstreams)
        entry.keys = {f"team-{tenant}": {dataplane.KEY: DATA_PLANE_KEY} for tenant in TENANTS}
        isvcs = [_isvc("chat", f"team-{t}", standard=standard) for t in TENANTS]
        isvcs.append(_isvc("blue-only", "team-blue"))
        entry.routes = build_routes(gate.sync(), isvcs)
        async with TestServer(entry.app()) as server:
            yield str(server.make_url("")).rstrip("/"), knative, entry


async def _post(url: str, key: str | None, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as answer,
    ):
        return answer.status, dict(answer.headers), await answer.text()


def _chat(model: str | None = "chat", *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Say hello."}],
                            "max_tokens": 4, "stream": stream}  # fmt: skip
    if model is not None:
        body["model"] = model
    return body


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_tenants_stream_goes_through_its_revisions_router(gateways: Gateways) -> None:
    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(gateways) as (url, knative, _):
            found = await _post(url, KEYS["blue"], _chat(stream=True))
            assert knative.seen == []
            return found

    status, headers, body = run(go())
    assert status == 200, body
    assert body.rstrip().endswith("data: [DONE]")
    assert headers["x-radixfleet-revision"] == f"team-blue/{REVISION}"
    assert headers["x-radixfleet-path"] == "router"


async def _through_blues_router(
    gateways: Gateways, router: Callable[[web.Request], Awaitable[web.StreamResponse]],
    body: dict[str, Any],
) -> tuple[int, dict[str, str], str]:  # fmt: skip
    """Blue's chat through the entry, with `router` standing in for blue's revision's router;
    the Knative way must not be taken."""
    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", router)])
    async with TestServer(app) as server, _entry(gateways) as (url, knative, entry):
        assert isinstance(entry.upstreams, LocalUpstreams)
        entry.upstreams.routers["team-blue"] = str(server.make_url("")).rstrip("/")
        found = await _post(url, KEYS["blue"], body)
        assert knative.seen == []
        return found


def test_a_stream_its_router_broke_before_the_first_event_is_sent_again(
    gateways: Gateways,
) -> None:
    """A router whose worker died between taking the request and its first token: the client
    has seen nothing, so the entry sends the request to the router once more."""
    calls: list[int] = []

    async def flaky(request: web.Request) -> web.StreamResponse:
        calls.append(len(calls))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if len(calls) == 1:
            assert request.transport is not None
            request.transport.close()
        else:
            await response.write(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
            await response.write(b"data: [DONE]\n\n")
        return response

    status, headers, body = run(_through_blues_router(gateways, flaky, _chat(stream=True)))
    assert status == 200 and len(calls) == 2
    assert body.count('"hi"') == 1 and "stream_error" not in body
    assert headers["x-radixfleet-path"] == "router"


async def _close(request: web.Request) -> web.StreamResponse:
    """The connection closed before an answer (the client sees the server disconnect)."""
    assert request.transport is not None
    request.transport.close()
    return web.Response()  # never sent: the connection is gone


async def _reset(request: web.Request) -> web.StreamResponse:
    """The connection reset (a kept-alive connection the router closed as the request came)."""
    connection_faults.reset(request)
    return web.Response()  # never sent: the connection is gone


async def _cut_short(request: web.Request) -> web.StreamResponse:
    """A whole answer cut after its headers and a few bytes of its body."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = 100
    await response.prepare(request)
    await response.write(b'{"choices": [')
    assert request.transport is not None
    request.transport.close()
    return response


@pytest.mark.parametrize("fail", [_close, _reset, _cut_short], ids=["closed", "reset", "cut-short"])
def test_a_whole_answer_its_router_failed_before_answering_is_sent_again(
    gateways: Gateways, fail: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> None:
    """A router that fails a non-streamed request before the client saw a byte of the answer
    (its pod replaced under it): the entry sends the request once more. It answered 502 at
    once, and the cluster demo's replay failed one request so (closed, then reset)."""
    calls: list[int] = []

    async def failing_once(request: web.Request) -> web.StreamResponse:
        calls.append(len(calls))
        if len(calls) == 1:
            return await fail(request)
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})

    status, headers, body = run(_through_blues_router(gateways, failing_once, _chat()))
    assert status == 200 and len(calls) == 2, body
    assert '"hi"' in body
    assert headers["x-radixfleet-path"] == "router"


def test_a_request_the_knative_way_reset_before_answering_is_sent_again(
    gateways: Gateways,
) -> None:
    """Red's router is not reachable, so its request goes the Knative way, whose first answer
    is a reset connection (an activator or queue-proxy replaced): sent once more, there."""

    async def go() -> tuple[int, dict[str, str], str, int]:
        async with _entry(gateways) as (url, knative, _):
            knative.resets = 1
            status, headers, body = await _post(url, "sk-red", _chat())
            return status, headers, body, len(knative.seen)

    status, headers, body, tries = run(go())
    assert status == 200 and tries == 2, body
    assert headers["x-radixfleet-path"] == "knative"


def test_a_router_that_fails_twice_is_the_clients_502_naming_the_failure(
    gateways: Gateways,
) -> None:
    """Sent once more, never more: a second failure is the client's 502, whose message names
    the kind of failure (and nothing of the cluster's Services)."""
    calls: list[int] = []

    async def always_resetting(request: web.Request) -> web.StreamResponse:
        calls.append(len(calls))
        return await _reset(request)

    status, _headers, body = run(_through_blues_router(gateways, always_resetting, _chat()))
    assert status == 502 and len(calls) == 2, body
    message = json.loads(body)["error"]["message"]
    assert message.startswith("The upstream failed to answer (") and "svc" not in message


@pytest.mark.parametrize(
    "tenant", ["green", "red"], ids=["router-without-workers", "router-not-reachable"]
)
def test_a_revision_its_router_cannot_serve_is_reached_the_knative_way(
    gateways: Gateways, tenant: str
) -> None:
    async def go() -> tuple[int, dict[str, str], list[dict[str, str]]]:
        async with _entry(gateways) as (url, knative, _):
            status, headers, _body = await _post(url, f"sk-{tenant}", _chat())
            return status, headers, knative.seen

    status, headers, seen = run(go())
    assert status == 200
    assert headers["x-radixfleet-path"] == "knative"
    (sent,) = seen
    assert sent["Knative-Serving-Revision"] == REVISION
    assert sent["Knative-Serving-Namespace"] == f"team-{tenant}"
    assert sent["Authorization"] == f"Bearer {DATA_PLANE_KEY}", "the data plane's key, only"


def test_a_standard_mode_model_is_served_through_its_heads_router(gateways: Gateways) -> None:
    async def go() -> tuple[int, dict[str, str], str, int]:
        async with _entry(gateways, standard=True) as (url, knative, _):
            status, headers, body = await _post(url, "sk-blue", _chat())
            return status, headers, body, len(knative.seen)

    status, headers, body, knative_calls = run(go())
    assert status == 200, body
    assert headers["x-radixfleet-path"] == "router"
    assert headers["x-radixfleet-revision"] == "team-blue/chat-predictor"
    assert knative_calls == 0


@pytest.mark.parametrize(
    "tenant", ["green", "red"], ids=["router-without-workers", "router-not-reachable"]
)
def test_a_standard_mode_model_whose_head_is_not_ready_waits_with_retry_after(
    gateways: Gateways, tenant: str
) -> None:
    """No activator holds a Standard-mode model's request (it is never at zero): the caller
    is told to come back, in OpenAI's error shape."""

    async def go() -> tuple[int, dict[str, str], str, int]:
        async with _entry(gateways, standard=True) as (url, knative, _):
            status, headers, body = await _post(url, f"sk-{tenant}", _chat())
            return status, headers, body, len(knative.seen)

    status, headers, body, knative_calls = run(go())
    assert status == 503, body
    assert int(headers["Retry-After"]) > 0
    assert "chat-predictor is not ready" in json.loads(body)["error"]["message"]
    assert knative_calls == 0, "a Standard-mode model has no Knative way"


def test_a_router_whose_connection_never_completes_is_passed_over_the_knative_way(
    gateways: Gateways,
) -> None:
    """The request reached no router (its connection timed out, which the stack rotation's
    test met in a run: a 502 `ConnectionTimeoutError`), so the Knative way answers it."""

    async def go() -> tuple[int, dict[str, str], str, int]:
        async with _entry(gateways, connect_timeout_s=0.5) as (url, knative, entry):
            assert isinstance(entry.upstreams, LocalUpstreams)
            entry.upstreams.routers["team-red"] = address
            status, headers, body = await _post(url, "sk-red", _chat())
            return status, headers, body, len(knative.seen)

    with connection_faults.never_connecting() as address:
        status, headers, body, tries = run(go())
    assert status == 200 and tries == 1, body
    assert headers["x-radixfleet-path"] == "knative"


@pytest.mark.parametrize(
    ("key", "body", "status", "code", "param"),
    [
        pytest.param(None, _chat(), 401, "invalid_api_key", None, id="no-key"),
        pytest.param("sk-nobody", _chat(), 401, "invalid_api_key", None, id="unknown-key"),
        pytest.param(
            "sk-green",
            _chat("blue-only"),
            404,
            "model_not_found",
            "model",
            id="another-tenants-model",
        ),
        pytest.param(
            "sk-blue", _chat(None), 400, None, "model", id="model-left-out-with-two-models"
        ),
        pytest.param("sk-blue", _chat("nope"), 404, "model_not_found", "model", id="no-such-model"),
    ],
)
def test_refusals_are_openais_errors(
    gateways: Gateways,
    key: str | None,
    body: dict[str, Any],
    status: int,
    code: str | None,
    param: str | None,
) -> None:
    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(gateways) as (url, _, _entry_app):
            return await _post(url, key, body)

    got, headers, text = run(go())
    assert got == status, text
    error = json.loads(text)["error"]
    assert set(error) == {"message", "type", "param", "code"}  # OpenAI's, as smg's relayed are
    assert (error["code"], error["param"]) == (code, param)
    assert error["type"] == "invalid_request_error" and error["message"]
    assert {k.lower(): v for k, v in headers.items()}["x-request-id"].startswith("req_")


@pytest.mark.parametrize("tenant", ["blue", "green"], ids=["router", "knative"])
def test_during_a_rotation_a_revision_holding_either_key_is_reached_without_a_401(
    gateways: Gateways, tenant: str
) -> None:
    """The Secret holds the old key and the new while a rotation runs (radixfleet.dataplane);
    each revision holds one. The real smg and the emulated replica hold the test's key, named
    here as the new one: the old is refused upstream, the entry tries the new, and remembers
    it for the revision's next request."""
    namespace = f"team-{tenant}"

    async def go() -> tuple[list[int], dict[tuple[str, str], str], int]:
        async with _entry(gateways) as (url, knative, entry):
            entry.keys[namespace] = {"api-key": "the-old-key", "api-key-2": DATA_PLANE_KEY}
            statuses = [(await _post(url, f"sk-{tenant}", _chat()))[0] for _ in range(3)]
            return statuses, dict(entry.revision_keys), len(knative.seen)

    statuses, pinned, _ = run(go())
    assert statuses == [200, 200, 200]
    assert pinned == {(namespace, REVISION): "api-key-2"}


def test_a_revision_refusing_every_key_is_the_platforms_502_not_the_callers_401(
    gateways: Gateways,
) -> None:
    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(gateways) as (url, _, entry):
            entry.keys["team-blue"] = {"api-key": "not-the-routers"}
            return await _post(url, "sk-blue", _chat())

    status, _, text = run(go())
    assert status == 502, text
    assert json.loads(text)["error"]["message"] == "The data plane of team-blue refused the entry."


def test_a_namespace_whose_data_plane_key_is_not_known_yet_waits_with_retry_after(
    gateways: Gateways,
) -> None:
    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(gateways) as (url, knative, entry):
            del entry.keys["team-blue"]
            found = await _post(url, "sk-blue", _chat())
            assert knative.seen == []
            return found

    status, headers, text = run(go())
    assert status == 503 and headers["Retry-After"] == "5", text


def test_the_router_refuses_a_call_without_the_data_plane_key(gateways: Gateways) -> None:
    # What a tenant pod reaching the router directly gets (the entry is the only way in).
    request = urllib.request.Request(
        f"{gateways.serving}/v1/chat/completions", data=json.dumps(_chat()).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-blue"},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_a_model_left_out_means_the_tenants_only_model(gateways: Gateways) -> None:
    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(gateways) as (url, _, _entry_app):
            return await _post(url, "sk-green", _chat(None))

    status, headers, _ = run(go())
    assert status == 200
    assert headers["x-radixfleet-revision"] == f"team-green/{REVISION}"


def test_a_tenant_over_its_share_of_the_budget_gets_429_and_others_are_served(
    gateways: Gateways,
) -> None:
    async def go() -> tuple[list[int], int]:
        async with _entry(gateways) as (url, _, _entry_app):
            red = [(await _post(url, "sk-red", _chat()))[0] for _ in range(3)]
            blue = (await _post(url, "sk-blue", _chat()))[0]
            return red, blue

    red, blue = run(go())
    assert 429 in red and blue == 200


def test_before_the_first_sync_every_request_waits_with_retry_after(gateways: Gateways) -> None:
    async def go() -> tuple[int, dict[str, str], str]:
        async with _entry(gateways) as (url, _, entry):
            entry.routes = None
            return await _post(url, "sk-blue", _chat())

    status, headers, _ = run(go())
    assert status == 503 and headers["Retry-After"] == "5"


def test_the_model_list_is_the_callers_own(gateways: Gateways) -> None:
    async def go() -> tuple[Any, int]:
        async with _entry(gateways) as (url, _, _entry_app), aiohttp.ClientSession() as s:
            async with s.get(f"{url}/v1/models", headers={"Authorization": "Bearer sk-blue"}) as a:
                listed = await a.json()
            async with s.get(f"{url}/v1/models") as anonymous:
                return listed, anonymous.status

    listed, anonymous = run(go())
    assert [m["id"] for m in listed["data"]] == ["blue-only", "chat"]
    assert anonymous == 401
    for model in listed["data"]:  # OpenAI's required fields; a typed client refused the list
        assert model | {"id": None} == {"id": None, "object": "model", "created": 1795858200,
                                        "owned_by": "blue"}  # fmt: skip


@pytest.mark.parametrize(
    ("key", "model", "status"),
    [
        pytest.param("sk-blue", "blue-only", 200, id="own-model"),
        pytest.param("sk-green", "blue-only", 404, id="another-tenants-model"),
        pytest.param("sk-blue", "nope", 404, id="no-such-model"),
        pytest.param(None, "chat", 401, id="no-key"),
    ],
)
def test_a_model_is_retrieved_by_its_tenant_only(
    gateways: Gateways, key: str | None, model: str, status: int
) -> None:
    async def go() -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            _entry(gateways) as (url, _, _entry_app),
            aiohttp.ClientSession() as s,
            s.get(f"{url}/v1/models/{model}", headers=headers) as answer,
        ):
            return answer.status, await answer.json()

    got, body = run(go())
    assert got == status, body
    if status == 200:
        assert (body["id"], body["owned_by"], body["created"]) == (model, "blue", 1795858200)
    else:
        assert body["error"]["code"] in ("model_not_found", "invalid_api_key")


def test_a_clients_request_id_reaches_the_router_and_comes_back(gateways: Gateways) -> None:
    async def go() -> tuple[str, list[str]]:
        async with _entry(gateways) as (url, knative, _entry_app), aiohttp.ClientSession() as s:
            headers = {"Authorization": "Bearer sk-red", "x-request-id": "trace-77"}
            async with s.post(f"{url}/v1/chat/completions", json=_chat(), headers=headers) as a:
                await a.read()
                ids = [v for h in knative.seen for k, v in h.items() if k.lower() == "x-request-id"]
                return a.headers["x-request-id"], ids

    returned, upstream = run(go())
    assert returned == "trace-77" and upstream == ["trace-77"]


@pytest.mark.parametrize("replicas", [1, 2, 3, 7])
def test_each_entry_replica_holds_its_share_of_a_budget_rounded_up(replicas: int) -> None:
    budget = TokenBudget(tokens_per_minute=1000, per_model={"chat": 100})
    share = per_replica(budget, replicas)
    assert share is not None
    assert share.tokens_per_minute * replicas >= 1000 > (share.tokens_per_minute - 1) * replicas
    assert share.per_model["chat"] * replicas >= 100
    assert per_replica(None, replicas) is None


SMG_NEVER_HAD_A_WORKER = (
    b'{"error":{"type":"Service Unavailable","code":"no_available_workers",'
    b'"message":"No available workers (all circuits open or unhealthy)"}}'
)
SMG_LOST_ITS_WORKERS = (
    b'{"error":{"type":"invalid_request_error","code":"model_not_found",'
    b'"message":"No worker available for model \'chat\'","param":null}}'
)


def test_a_prompt_is_counted_by_its_revisions_router_with_the_data_plane_key(
    gateways: Gateways, tokenizer: EmulatorTokenizer
) -> None:
    texts = ["東京の天気は晴れのち曇りでしょう。", "Say hello to the whole team."]

    async def counts() -> tuple[int | None, int | None]:
        async with _entry(gateways) as (_, _knative, entry):
            return (await entry.count_prompt("blue", "chat", texts),
                    await entry.count_prompt("green", "chat", texts))  # fmt: skip

    blue, green = run(counts())
    assert blue == sum(len(tokenizer.encode(text)) for text in texts)
    assert green is None  # its router holds no tokenizer: the gate charges the byte bound


def test_during_a_rotation_a_prompt_is_counted_with_whichever_key_the_router_holds(
    gateways: Gateways, tokenizer: EmulatorTokenizer
) -> None:
    # The first count of a revision comes before any request has pinned its key: with one key
    # tried, a router holding the other refused it, and the prompt was charged its byte bound.
    texts = ["Say hello to the whole team."]

    async def count() -> int | None:
        async with _entry(gateways) as (_, _knative, entry):
            entry.keys["team-blue"] = {"a-retired": "not-the-routers-key",
                                       "b-current": DATA_PLANE_KEY}  # fmt: skip
            return await entry.count_prompt("blue", "chat", texts)

    assert run(count()) == len(tokenizer.encode(texts[0]))


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(503, SMG_NEVER_HAD_A_WORKER, True, id="no-worker-yet"),
        pytest.param(404, SMG_LOST_ITS_WORKERS, True, id="last-worker-gone"),
        pytest.param(503, b'{"error": {"code": "overloaded"}}', False, id="another-503"),
        pytest.param(404, b"not json", False, id="not-json"),
        pytest.param(200, SMG_NEVER_HAD_A_WORKER, False, id="a-200"),
    ],
)
def test_the_entry_reads_smgs_answers_for_no_worker(
    status: int, body: bytes, expected: bool
) -> None:
    """The bodies are smg 1.13.0's, as seen here and on the test cluster."""
    assert router_has_no_worker(status, body) is expected


def test_routes_need_no_network() -> None:
    assert Routes().resolve("blue", "chat") is None
