"""The entry's relay of its region's Prometheus to the fleet's failover (`entry/signals.py`).

Real parts: Debian's Prometheus holding a backfilled series, the relay's aiohttp application,
and the failover's own client (`HttpPrometheus`, which POSTs its queries as a form). Nothing
stands in; a Prometheus that is down is a closed port.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import aiohttp
import pytest
import requests
from aiohttp import web

from radixfleet.adapters.prometheus import NO_RETRY, HttpPrometheus, MetricsUnavailable
from radixfleet.dataplane.relay import error_middleware
from radixfleet.dataplane.signals import MAX_FORM_BYTES, MAX_QUERY_CHARS, PREFIX, SignalsRelay
from tests.adapters.prometheus_server import Family, running_prometheus

pytestmark = pytest.mark.prometheus

TOKEN = "fleet-token-for-tests"
AT = datetime.fromtimestamp(1_780_000_000, tz=UTC)
SERIES = Family(
    name="radixfleet_test_ready",
    type="gauge",
    lines=[f'radixfleet_test_ready{{model="chat"}} 3 {AT.timestamp() - s:.0f}' for s in (60, 0)],
)


@pytest.fixture(scope="module")
def prometheus_url() -> Iterator[str]:
    with running_prometheus([SERIES]) as url:
        yield url


@contextmanager
def relay_at(prometheus_url: str | None) -> Iterator[str]:
    """A `SignalsRelay` served on a background loop; yields the base URL the failover reads."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[web.AppRunner, aiohttp.ClientSession]:
        session = aiohttp.ClientSession()
        app = web.Application(middlewares=[error_middleware])  # the entries' own
        SignalsRelay(token=TOKEN, session=session, prometheus_url=prometheus_url).install(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner, session

    runner, session = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}{PREFIX}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _client(url: str, token: str) -> HttpPrometheus:
    return HttpPrometheus(url, retry=NO_RETRY, headers={"Authorization": f"Bearer {token}"})


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_failovers_client_reads_the_regions_prometheus_with_the_fleet_token(
    prometheus_url: str,
) -> None:
    with relay_at(prometheus_url) as url:
        client = _client(url, TOKEN)
        assert client.scalar('radixfleet_test_ready{model="chat"}', at=AT) == 3.0
        assert client.is_online()


@pytest.mark.parametrize(
    "token", ["", "not-the-fleet-token", TOKEN[:-1]], ids=["none", "wrong", "a-prefix"]
)
def test_without_the_fleet_token_nothing_is_read(prometheus_url: str, token: str) -> None:
    with relay_at(prometheus_url) as url:
        client = _client(url, token)
        with pytest.raises(MetricsUnavailable) as refused:
            client.scalar("radixfleet_test_ready", at=AT)
        assert refused.value.status == 401
        assert not client.is_online()


@pytest.mark.parametrize(
    ("params", "form", "status"),
    [
        pytest.param({}, None, 400, id="no-query"),
        pytest.param({"query": "x" * (MAX_QUERY_CHARS + 1)}, None, 400, id="query-too-long"),
        pytest.param({}, b"query=" + b"x" * MAX_FORM_BYTES, 413, id="form-too-large"),
        pytest.param({}, b"query=\xff\xfe", 400, id="form-not-utf8"),
    ],
)
def test_bad_queries_get_a_json_error_and_the_relay_keeps_answering(
    prometheus_url: str, params: dict[str, str], form: bytes | None, status: int
) -> None:
    with relay_at(prometheus_url) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        query_url = f"{url}/api/v1/query"
        if form is None:
            answer = requests.get(query_url, params=params, headers=auth, timeout=10)
        else:
            headers = {**auth, "Content-Type": "application/x-www-form-urlencoded"}
            answer = requests.post(query_url, data=form, headers=headers, timeout=10)
        assert answer.status_code == status
        assert answer.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape
        assert _client(url, TOKEN).scalar("radixfleet_test_ready", at=AT) == 3.0


@pytest.mark.parametrize(
    ("upstream", "status"),
    [pytest.param(None, 503, id="no-prometheus-yet"), pytest.param("closed", 502, id="down")],
)
def test_a_prometheus_that_cannot_answer_makes_the_region_unreadable_not_wrong(
    upstream: str | None, status: int
) -> None:
    target = None if upstream is None else f"http://127.0.0.1:{_closed_port()}"
    with relay_at(target) as url:
        with pytest.raises(MetricsUnavailable) as unavailable:
            _client(url, TOKEN).scalar("radixfleet_test_ready", at=AT)
        assert unavailable.value.status == status
