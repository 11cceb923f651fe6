"""The region entry against fakes: a stand-in router and a fake Scaler that records its calls.

Wake from zero (held requests succeed, one wake for many), the bounded wait (503 with
Retry-After), streaming through, bad input answered with OpenAI's errors, OpenAI's model
routes and request ids, and a client's hang-up reaching the router.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import TokenLedger
from radixfleet.dataplane.relay import entry_runner, upstream_timeout
from radixfleet.localfleet.entry import Baseline, Canary, RegionEntry, RouterPool
from radixfleet.localfleet.scaler import ReplicaInfo
from tests import connection_faults


class FakeScaler:
    """Records scale_to calls; becomes ready `wake_s` after a scale-up (never if None)."""

    def __init__(self, model: str, *, ready: int = 0, wake_s: float | None = 0.2) -> None:
        self._model = model
        self._ready = ready
        self._desired = ready
        self.wake_s = wake_s
        self.scale_calls: list[int] = []
        self._changed = asyncio.Event()

    @property
    def region(self) -> str:
        return "test"

    @property
    def model(self) -> str:
        return self._model

    def desired(self) -> int:
        return self._desired

    def ready_count(self) -> int:
        return self._ready

    def replicas(self) -> list[ReplicaInfo]:
        return []

    def scale_to(self, replicas: int) -> int:
        self.scale_calls.append(replicas)
        self._desired = replicas
        if self.wake_s is not None:
            asyncio.get_running_loop().call_later(self.wake_s, self._become_ready)
        return replicas

    def drain(self, replica_id: str) -> bool:
        return False

    def _become_ready(self) -> None:
        self._ready = self._desired
        self._changed.set()

    async def wait_ready(self, *, at_least: int = 1, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return self._ready >= at_least


async def router_standin(request: web.Request) -> web.StreamResponse:
    """Answers like smg: whole JSON, or SSE when asked to stream."""
    body = await request.json()
    if not body.get("stream"):
        seen = request.headers.get("Authorization")  # what reached the router, if anything
        return web.json_response(
            {"model": body["model"], "choices": [{"text": " hi"}], "authorization": seen}
        )
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for word in (" one", " two"):
        await response.write(f"data: {json.dumps({'choices': [{'text': word}]})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


@asynccontextmanager
async def serve(app: web.Application, *, entry: bool = False) -> AsyncIterator[str]:
    """`app` on a free port; an entry's on the runner the entries ship with."""
    if entry:
        runner = entry_runner(app, shutdown_timeout=1.0, access_log=None)
    else:
        runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


Scenario = Callable[[aiohttp.ClientSession, str, RegionEntry], Awaitable[None]]


def one_model_entry(
    session: aiohttp.ClientSession,
    router: str | RouterPool,
    *,
    wake_timeout_s: float = 5,
    split_seed: int | None = None,
) -> RegionEntry:
    """The region entry of one model, `m`, ready at one replica behind `router`."""
    return RegionEntry(
        region="test", scalers={"m": FakeScaler("m", ready=1)}, routers={"m": router},
        session=session, wake_timeout_s=wake_timeout_s, retry_after_s=7, split_seed=split_seed,
    )  # fmt: skip


def run(scalers: dict[str, FakeScaler], scenario: Scenario, *, wake_timeout_s: float = 5) -> None:
    async def main() -> None:
        upstream = web.Application()
        upstream.router.add_post("/v1/completions", router_standin)
        async with serve(upstream) as router, aiohttp.ClientSession() as session:
            entry = RegionEntry(
                region="test",
                scalers=scalers,
                routers={name: router for name in scalers},
                session=session,
                wake_timeout_s=wake_timeout_s,
                retry_after_s=7,
            )
            async with serve(entry.app, entry=True) as url:
                await scenario(session, url, entry)

    asyncio.run(main())


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(f"{url}/v1/completions", data=data) as answer:
        text = await answer.text()
        return answer.status, text, answer.headers


def test_requests_to_a_model_at_zero_are_held_and_wake_it_once() -> None:
    scaler = FakeScaler("m", wake_s=0.3)

    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        answers = await asyncio.gather(*(post(session, url, {"model": "m"}) for _ in range(5)))
        assert [status for status, _, _ in answers] == [200] * 5
        assert scaler.scale_calls == [1]  # one wake for five held requests
        assert all(held >= 0.25 for _, held in entry.woken)

    run({"m": scaler}, scenario)


def test_a_wake_that_takes_too_long_answers_503_with_retry_after() -> None:
    scaler = FakeScaler("m", wake_s=None)

    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        status, text, headers = await post(session, url, {"model": "m"})
        assert (status, headers["Retry-After"]) == (503, "7")
        error = json.loads(text)["error"]
        assert (error["type"], error["code"]) == ("server_error", "service_unavailable")
        assert "starting from zero" in error["message"]

    run({"m": scaler}, scenario, wake_timeout_s=0.3)


def test_streams_pass_through_unchanged() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        status, text, headers = await post(session, url, {"model": "m", "stream": True})
        assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
        assert text.count("data: ") == 3 and text.endswith("data: [DONE]\n\n")

    run({"m": FakeScaler("m", ready=1)}, scenario)


def test_the_only_model_of_a_region_is_the_default() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        status, _, _ = await post(session, url, {"prompt": "x"})
        assert status == 200

    run({"m": FakeScaler("m", ready=1)}, scenario)


def test_a_callers_key_never_reaches_the_router() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        headers = {"Authorization": "Bearer sk-tenant-secret"}
        async with session.post(f"{url}/v1/completions", json={"model": "m"},
                                headers=headers) as answer:  # fmt: skip
            assert answer.status == 200
            assert (await answer.json())["authorization"] is None

    run({"m": FakeScaler("m", ready=1)}, scenario)


def test_bad_input_gets_openais_errors_not_tracebacks() -> None:
    scalers = {"a": FakeScaler("a", ready=1), "b": FakeScaler("b", ready=1)}

    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        cases = {
            b"{not json": (400, None, None, "Invalid JSON body"),
            b"[1, 2]": (400, None, None, "must be a JSON object"),
            json.dumps({"model": "nope"}).encode(): (
                404,
                "model_not_found",
                "model",
                "'nope' does not exist",
            ),
            json.dumps({"prompt": "x"}).encode(): (400, None, "model", "'model' is required"),
        }
        for body, (status_wanted, code, param, words) in cases.items():
            status, text, _ = await post(session, url, body)
            error = json.loads(text)["error"]
            assert status == status_wanted and error["type"] == "invalid_request_error", body
            assert (error["code"], error["param"]) == (code, param), body
            assert words in error["message"] and "Traceback" not in text
        async with session.get(f"{url}/no/such/path") as answer:
            assert answer.status == 404
            assert (await answer.json())["error"]["code"] == "not_found"
        async with session.get(f"{url}/v1/chat/completions") as answer:
            assert answer.status == 405 and answer.headers["Allow"] == "POST"
            assert (await answer.json())["error"]["code"] == "method_not_allowed"
        assert all(count == 0 for count in entry.in_flight.values())

    run(scalers, scenario)


def test_a_region_taken_down_refuses_with_503() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        entry.accepting = False
        status, _, headers = await post(session, url, {"model": "m"})
        assert (status, headers["Retry-After"]) == (503, "7")
        async with session.get(f"{url}/health") as answer:
            assert answer.status == 503

    run({"m": FakeScaler("m", ready=1)}, scenario)


def labelled(revision: str) -> web.Application:
    """A stand-in router that says which revision answered."""

    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"revision": revision})

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    return app


def test_the_canary_gets_its_percent_of_requests_and_all_once_promoted() -> None:
    async def main() -> None:
        async with (
            serve(labelled("stable")) as stable,
            serve(labelled("canary")) as canary,
            aiohttp.ClientSession() as session,
        ):
            entry = one_model_entry(session, stable, split_seed=0)
            split = Canary("m-predictor-00002", canary, FakeScaler("m", ready=1), percent=20)
            entry.canaries["m"] = split
            async with serve(entry.app) as url:

                async def served(n: int) -> list[str]:
                    answers = [await post(session, url, {"model": "m"}) for _ in range(n)]
                    return [json.loads(text)["revision"] for _, text, _ in answers]

                assert 0.12 < (await served(200)).count("canary") / 200 < 0.28
                split.percent = 0  # a rollback: the canary stays, pinned
                assert set(await served(20)) == {"stable"}
                assert entry.promote("m") is split
                assert set(await served(20)) == {"canary"}
                assert entry.in_flight_by_router == {stable: 0, canary: 0}

    asyncio.run(main())


def test_a_baseline_that_serves_gets_as_much_as_the_canary_and_none_before() -> None:
    async def main() -> None:
        async with (
            serve(labelled("stable")) as stable,
            serve(labelled("canary")) as canary,
            serve(labelled("baseline")) as baseline,
            aiohttp.ClientSession() as session,
        ):
            entry = one_model_entry(session, stable, split_seed=0)
            starting = FakeScaler("m", ready=0, wake_s=None)
            split = Canary("m-predictor-00002", canary, FakeScaler("m", ready=1), percent=20,
                           baseline=Baseline(baseline, starting))  # fmt: skip
            entry.canaries["m"] = split
            async with serve(entry.app) as url:

                async def served(n: int) -> Counter[str]:
                    answers = [await post(session, url, {"model": "m"}) for _ in range(n)]
                    return Counter(json.loads(text)["revision"] for _, text, _ in answers)

                # Not ready: its share stays with the stable revision, and it is never woken.
                assert (await served(100))["baseline"] == 0 and starting.scale_calls == []
                split.baseline = Baseline(baseline, FakeScaler("m", ready=1))
                counts = await served(300)
                assert 0.12 < counts["canary"] / 300 < 0.28
                assert 0.12 < counts["baseline"] / 300 < 0.28

    asyncio.run(main())


def test_a_revisions_requests_spread_over_its_router_replicas_by_prompt() -> None:
    async def main() -> None:
        async with (
            serve(labelled("first")) as first,
            serve(labelled("second")) as second,
            aiohttp.ClientSession() as session,
        ):
            pool = RouterPool((first, second))
            entry = one_model_entry(session, pool)
            async with serve(entry.app) as url:

                async def served(prompt: str) -> str:
                    _, text, _ = await post(session, url, {"model": "m", "prompt": prompt})
                    return str(json.loads(text)["revision"])

                def system(t: int) -> str:  # longer than the opening the entry hashes
                    return f"You are the assistant of tenant {t}. " * 40

                tenants = [[await served(system(t) + f"Question {q}") for q in range(3)]
                           for t in range(12)]  # fmt: skip
                assert all(len(set(answers)) == 1 for answers in tenants)  # one router each
                assert {answers[0] for answers in tenants} == {"first", "second"}
                assert entry.in_flight_by_router == {first: 0}  # counted under the pool's key

    asyncio.run(main())


NOT_READY = {
    "error": {
        "type": "server_error",
        "code": "tokenizer_not_ready",
        "message": "Tokenizer for model 'm' is not registered yet; retry shortly",
    }
}
OVERLOADED = {"error": {"type": "server_error", "code": "overloaded", "message": "busy"}}


def registering(answers: list[tuple[int, dict[str, Any]]]) -> tuple[web.Application, list[int]]:
    """A stand-in router that gives `answers` in turn (then 200), recording each call."""
    calls: list[int] = []

    async def answer(_request: web.Request) -> web.StreamResponse:
        calls.append(len(calls))
        status, body = answers[len(calls) - 1] if len(calls) <= len(answers) else (200, {})
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    return app, calls


def _through(router_app: web.Application, *, wake_timeout_s: float = 5) -> tuple[int, Any]:
    status, body, _ = _through_with_headers(router_app, wake_timeout_s=wake_timeout_s)
    return status, body


def _through_with_headers(
    router_app: web.Application, *, wake_timeout_s: float = 5
) -> tuple[int, Any, Mapping[str, str]]:
    async def main() -> tuple[int, Any, Mapping[str, str]]:
        async with serve(router_app) as router, aiohttp.ClientSession() as session:
            entry = one_model_entry(session, router, wake_timeout_s=wake_timeout_s)
            async with serve(entry.app, entry=True) as url:
                status, text, headers = await post(session, url, {"model": "m"})
                return status, json.loads(text), headers

    return asyncio.run(main())


def test_a_router_still_registering_the_models_tokenizer_is_retried() -> None:
    """smg answers 503 tokenizer_not_ready for a moment after a woken replica registers; the
    request never reached a worker, so the entry retries it rather than fail a wake."""
    app, calls = registering([(503, NOT_READY), (503, NOT_READY)])
    assert _through(app) == (200, {})
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("answers", "wake_timeout_s"),
    [
        pytest.param([(503, OVERLOADED)], 5, id="another-503-is-the-clients"),
        pytest.param([(503, NOT_READY)] * 100, 0.3, id="not-ready-past-the-wake-timeout"),
    ],
)
def test_other_503s_and_a_router_that_never_gets_ready_are_passed_on(
    answers: list[tuple[int, dict[str, Any]]], wake_timeout_s: float
) -> None:
    app, calls = registering(answers)
    status, body, headers = _through_with_headers(app, wake_timeout_s=wake_timeout_s)
    assert status == 503 and body == answers[0][1]
    assert len(calls) < len(answers) or len(calls) == 1
    assert headers["Retry-After"] == "5"  # smg sends none; a client backs off by ours


EVENT = b'data: {"choices": [{"text": " one"}]}\n\n'
SERVER_ERROR = b'data: {"error": {"message": "worker died", "code": 500}}\n\ndata: [DONE]\n\n'
CLIENT_ERROR = b'data: {"error": {"message": "prompt too long", "code": 400}}\n\ndata: [DONE]\n\n'


async def _breaks_first(request: web.Request, response: web.StreamResponse) -> None:
    assert request.transport is not None
    request.transport.close()  # headers sent, no event: as a router whose worker just died


async def _ends_empty(_request: web.Request, response: web.StreamResponse) -> None:
    await response.write_eof()


def _writes(data: bytes) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    async def write(_request: web.Request, response: web.StreamResponse) -> None:
        await response.write(data)

    return write


async def _breaks_after_an_event(request: web.Request, response: web.StreamResponse) -> None:
    await response.write(EVENT)
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.close()


async def _resets_after_an_event(request: web.Request, response: web.StreamResponse) -> None:
    await response.write(EVENT)
    await asyncio.sleep(0.05)
    connection_faults.reset(request)


GOOD = _writes(EVENT + b"data: [DONE]\n\n")
Stream = Callable[[web.Request, web.StreamResponse], Awaitable[None]]


def streaming(answers: list[Stream]) -> tuple[web.Application, list[int]]:
    """A stand-in router whose streams behave as `answers` say in turn (then GOOD)."""
    calls: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        calls.append(len(calls))
        behave = answers[len(calls) - 1] if len(calls) <= len(answers) else GOOD
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await behave(request, response)
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    return app, calls


def _stream_through(router_app: web.Application) -> tuple[int, bytes]:
    async def main() -> tuple[int, bytes]:
        async with serve(router_app) as router, aiohttp.ClientSession() as session:
            entry = one_model_entry(session, router)
            async with (
                serve(entry.app) as url,
                session.post(f"{url}/v1/completions", json={"model": "m", "stream": True}) as got,
            ):
                return got.status, await got.read()

    return asyncio.run(main())


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(_breaks_first, id="broken-before-its-first-event"),
        pytest.param(_ends_empty, id="ended-with-no-event"),
        pytest.param(_writes(SERVER_ERROR), id="opened-with-a-server-error"),
    ],
)
def test_a_stream_that_fails_before_its_first_event_is_sent_again(first: Stream) -> None:
    """The client has seen nothing, not even a status: the entry sends the request once more
    and the client gets one clean stream."""
    app, calls = streaming([first])
    assert _stream_through(app) == (200, EVENT + b"data: [DONE]\n\n")
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("answers", "expected_calls", "client_sees"),
    [
        pytest.param([_writes(CLIENT_ERROR)], 1, CLIENT_ERROR, id="a-client-error-is-the-clients"),
        pytest.param([_breaks_after_an_event], 1, EVENT, id="broken-after-a-token"),
        pytest.param([_resets_after_an_event], 1, EVENT, id="reset-after-a-token"),
        pytest.param([_breaks_first, _breaks_first], 2, b"", id="broken-twice"),
    ],
)
def test_a_stream_is_sent_once_more_at_most_and_never_after_a_token(
    answers: list[Stream], expected_calls: int, client_sees: bytes
) -> None:
    app, calls = streaming(answers)
    status, body = _stream_through(app)
    assert status == 200 and body.startswith(client_sees)
    assert len(calls) == expected_calls
    assert body.count(EVENT) <= 1  # no token sent twice
    assert body.endswith(b"data: [DONE]\n\n")  # a broken stream ends with an error and [DONE]
    assert body == client_sees or b'"stream_error"' in body


def test_a_client_that_hangs_up_on_a_whole_answer_closes_the_request_to_the_router() -> None:
    # aiohttp ran the entry's handler to the end: smg kept generating (and the gate charging)
    # an answer nobody would read. Now the router sees the connection close, and smg aborts.
    async def main() -> None:
        hung_up = asyncio.Event()

        async def slow_router(request: web.Request) -> web.StreamResponse:
            await request.read()
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.02)
            hung_up.set()
            return web.json_response({})

        upstream = web.Application()
        upstream.router.add_post("/v1/completions", slow_router)
        async with serve(upstream) as router, aiohttp.ClientSession() as session:
            entry = one_model_entry(session, router)
            async with serve(entry.app, entry=True) as url:
                with pytest.raises(TimeoutError):
                    await session.post(f"{url}/v1/completions", json={"model": "m"},
                                       timeout=aiohttp.ClientTimeout(total=0.5))  # fmt: skip
                await asyncio.wait_for(hung_up.wait(), timeout=20)
                assert entry.in_flight["m"] == 0

    asyncio.run(main())


def test_models_are_openai_model_objects_and_each_can_be_retrieved() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, entry: RegionEntry) -> None:
        async with session.get(f"{url}/v1/models") as answer:
            listed = (await answer.json())["data"]
        assert [m["id"] for m in listed] == ["m"]
        assert {"id", "object", "created", "owned_by"} <= set(listed[0])
        assert abs(listed[0]["created"] - time.time()) < 600
        async with session.get(f"{url}/v1/models/m") as answer:
            assert answer.status == 200 and await answer.json() == listed[0]
        async with session.get(f"{url}/v1/models/nope") as answer:
            assert answer.status == 404
            assert (await answer.json())["error"]["code"] == "model_not_found"

    run({"m": FakeScaler("m", ready=1)}, scenario)


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        pytest.param("trace-4f1c.2", True, id="a-clients-id-is-kept"),
        pytest.param(None, False, id="none-given-one-is-made"),
        pytest.param("x" * 200, False, id="too-long-is-replaced"),
        pytest.param("a b\tc", False, id="spaces-are-replaced"),
    ],
)
def test_every_answer_carries_the_request_id_the_router_saw(sent: str | None, kept: bool) -> None:
    async def main() -> None:
        seen: list[str] = []

        async def recording_router(request: web.Request) -> web.StreamResponse:
            seen.append(request.headers.get("x-request-id", ""))
            return web.json_response({"choices": []})

        upstream = web.Application()
        upstream.router.add_post("/v1/completions", recording_router)
        async with serve(upstream) as router, aiohttp.ClientSession() as session:
            entry = one_model_entry(session, router)
            async with serve(entry.app, entry=True) as url:
                headers = {"x-request-id": sent} if sent is not None else {}
                async with session.post(f"{url}/v1/completions", json={"model": "m"},
                                        headers=headers) as answer:  # fmt: skip
                    returned = answer.headers["x-request-id"]
                async with session.get(f"{url}/v1/models/nope", headers=headers) as refused:
                    assert refused.headers["x-request-id"] != ""
        assert seen == [returned]
        assert (returned == sent) is kept
        if not kept:
            assert returned.startswith("req_")

    asyncio.run(main())


def test_a_client_that_hangs_up_mid_stream_stops_the_router_and_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each such hang-up logged a full traceback at ERROR (the handler wrote to a closed client).
    async def main() -> None:
        hung_up = asyncio.Event()

        async def endless(_request: web.Request, response: web.StreamResponse) -> None:
            try:
                while True:
                    await response.write(EVENT)
                    await asyncio.sleep(0.02)
            except ConnectionResetError:
                hung_up.set()

        upstream, _ = streaming([endless])
        async with serve(upstream) as router, aiohttp.ClientSession() as session:
            entry = one_model_entry(session, router)
            async with serve(entry.app, entry=True) as url:
                answer = await session.post(f"{url}/v1/completions",
                                            json={"model": "m", "stream": True})  # fmt: skip
                await answer.content.readline()
                answer.close()
                await asyncio.wait_for(hung_up.wait(), timeout=20)

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_stream_that_stalls_past_the_idle_timeout_is_ended_with_an_error_event() -> None:
    # Streams were never cut (the cluster entry read for up to 600 s): a stalled router held
    # the connection, and the tenant's share of them, for as long.
    async def main() -> str:
        released = asyncio.Event()

        async def stalls(_request: web.Request, response: web.StreamResponse) -> None:
            await response.write(EVENT)
            await released.wait()  # stalled until the test is over

        upstream, _ = streaming([stalls])
        async with (
            serve(upstream) as router,
            aiohttp.ClientSession(timeout=upstream_timeout(idle_s=0.5)) as entrys,
            aiohttp.ClientSession() as clients,
        ):
            entry = one_model_entry(entrys, router)
            async with serve(entry.app, entry=True) as url:
                try:
                    status, text, _ = await asyncio.wait_for(
                        post(clients, url, {"model": "m", "stream": True}), timeout=30
                    )
                finally:
                    released.set()
                assert status == 200
                return str(text)

    text = asyncio.run(main())
    assert text.startswith(EVENT.decode()) and text.endswith("data: [DONE]\n\n")
    assert '"code": "stream_error"' in text


def _resets_once(calls: list[int]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A router whose first request's connection is reset (a kept-alive connection it closed as
    the request came, which the kernel answers with a reset); then a whole answer."""

    async def answer(request: web.Request) -> web.StreamResponse:
        calls.append(len(calls))
        if len(calls) == 1:
            connection_faults.reset(request)
        return web.json_response({"choices": [{"text": " one"}]})

    return answer


def test_a_whole_answer_whose_connection_was_reset_is_sent_again() -> None:
    """A reset before any byte of the answer repeats nothing the client saw: sent once more
    (as the cluster's entry does, tests/entry/test_server.py), not the client's 502."""
    calls: list[int] = []
    app = web.Application()
    app.router.add_post("/v1/completions", _resets_once(calls))

    async def main() -> tuple[int, bytes]:
        async with serve(app) as router, aiohttp.ClientSession() as session:
            entry = one_model_entry(session, router)
            async with (
                serve(entry.app) as url,
                session.post(f"{url}/v1/completions", json={"model": "m"}) as got,
            ):
                return got.status, await got.read()

    status, body = asyncio.run(main())
    assert status == 200 and b" one" in body and len(calls) == 2


def test_a_router_whose_connection_never_completes_is_not_reachable_not_a_failure() -> None:
    """A router address whose SYNs are dropped (a full accept queue here; in a cluster, a pod
    gone before kube-proxy caught up): the request reached no router, so the entry tries again
    until its wake timeout and answers 503 with Retry-After, as for a refused connection, where
    it answered 502 at once."""

    async def main() -> tuple[int, dict[str, Any], float]:
        timeout = aiohttp.ClientTimeout(sock_connect=0.3)
        with connection_faults.never_connecting() as never:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                entry = one_model_entry(session, never, wake_timeout_s=1)
                async with serve(entry.app) as url:
                    began = time.monotonic()
                    status, text, _ = await post(session, url, {"model": "m"})
                    return status, json.loads(text), time.monotonic() - began

    status, body, took_s = asyncio.run(main())
    assert status == 503, body
    assert "not reachable" in body["error"]["message"]
    assert took_s >= 1  # it kept trying until the wake timeout


def test_a_tenant_sees_and_reaches_only_its_own_models_as_on_the_cluster() -> None:
    """The local fleet's entry is the cluster's front (radixfleet/dataplane/front.py): with a
    gate, a key lists and calls only its tenant's models, another tenant's model is exactly no
    model, and a request naming none is served by the tenant's only one. Before, every key saw
    and reached every model of the region."""
    gate = TokenGate(ledger=TokenLedger({"blue": None, "green": None}),
                     keys={"key-blue": "blue", "key-green": "green"})  # fmt: skip

    async def main() -> None:
        upstream = web.Application()
        upstream.router.add_post("/v1/completions", router_standin)
        async with serve(upstream) as router, aiohttp.ClientSession() as session:
            entry = RegionEntry(
                region="test", scalers={m: FakeScaler(m, ready=1) for m in ("a", "b", "shared")},
                routers={m: router for m in ("a", "b", "shared")}, session=session,
                wake_timeout_s=5, retry_after_s=7, gate=gate,
                owners={"a": ["blue"], "b": ["green"]},
            )  # fmt: skip
            async with serve(entry.app, entry=True) as url:
                await _scoped(session, url)

    asyncio.run(main())


async def _scoped(session: aiohttp.ClientSession, url: str) -> None:
    blue = {"Authorization": "Bearer key-blue"}
    async with session.get(f"{url}/v1/models", headers=blue) as answer:
        assert [m["id"] for m in (await answer.json())["data"]] == ["a", "shared"]
    async with session.get(f"{url}/v1/models/b", headers=blue) as answer:
        assert answer.status == 404
    async with session.get(f"{url}/v1/models") as answer:
        assert answer.status == 401
    calls = {"b": 404, "a": 200, "shared": 200}
    for model, status in calls.items():
        async with session.post(f"{url}/v1/completions", json={"model": model, "prompt": "x"},
                                headers=blue) as answer:  # fmt: skip
            assert answer.status == status, (model, await answer.text())
    green = {"Authorization": "Bearer key-green"}
    async with session.post(f"{url}/v1/completions", json={"prompt": "x"}, headers=green) as a:
        assert a.status == 400  # green has two models: `b` and the shared one
