"""A region's serving signals for the fleet's failover controller, relayed by the region's entry.

The failover controller runs once per fleet, in one region, and judges every region on that
region's own Prometheus (availability, errors, TTFT burn rate, ready replicas: the PromQL of
`radixfleet/controllers/failover/queries.py`). A region's Prometheus is cluster-internal; the one
thing each region already exposes is its entry, behind the region's load balancer, certificate and
DNS name. So the entry relays Prometheus' instant-query API, read-only, to holders of the fleet
token (one Secret that every region's entry and the failover share; tenants' keys do not open
it):

    GET|POST /fleet/v1/prometheus/api/v1/query  query, time, timeout: Prometheus' own answer
    GET      /fleet/v1/prometheus/-/ready       200 once Prometheus is ready

Why this and not federation or remote write: both need a global Prometheus that every region's
private network reaches, one more stateful service to run and to lose in an outage; this needs
nothing the regions do not have. Why the query API and not a fixed signals document: the
failover's queries depend on each policy (models, window, SLO) and stay in one place, and the
token reads metrics only. A region that cannot be reached this way is blind to the failover,
which then goes by its health check and its peers' probes, as it does when Prometheus is down.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

from radixfleet.dataplane.errors import EntryError

log = logging.getLogger(__name__)

PREFIX = "/fleet/v1/prometheus"
QUERY_PATH = f"{PREFIX}/api/v1/query"
READY_PATH = f"{PREFIX}/-/ready"
TOKEN_ENV = "RADIXFLEET_FLEET_TOKEN"
# The failover's longest query is a few hundred characters; anything near this is not one.
MAX_QUERY_CHARS = 4096
MAX_FORM_BYTES = 16 * 1024
FORWARDED_PARAMS = ("query", "time", "timeout")


@dataclass
class SignalsRelay:
    """The two read-only routes; `prometheus_url` None answers 503 (no Prometheus yet)."""

    token: str
    session: aiohttp.ClientSession
    prometheus_url: str | None = None
    timeout_s: float = 10.0

    def install(self, app: web.Application) -> None:
        app.add_routes([
            web.get(QUERY_PATH, self.query),
            web.post(QUERY_PATH, self.query),  # Prometheus' clients POST a form (long queries)
            web.get(READY_PATH, self.ready),
        ])  # fmt: skip

    async def query(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        given = await _params(request)
        params = {k: given[k] for k in FORWARDED_PARAMS if k in given}
        if not params.get("query"):
            raise EntryError(400, "Parameter 'query' is required.")
        if len(params["query"]) > MAX_QUERY_CHARS:
            raise EntryError(400, f"Parameter 'query' is longer than {MAX_QUERY_CHARS} characters.")
        return await self._relay("/api/v1/query", params)

    async def ready(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        return await self._relay("/-/ready", {})

    def _authorize(self, request: web.Request) -> None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # Constant time: the token must not leak through how fast a wrong one is refused.
        matches = hmac.compare_digest(given.strip().encode(), self.token.encode())
        if scheme.lower() != "bearer" or not self.token or not matches:
            raise EntryError(401, "Unknown or missing fleet token.")

    async def _relay(self, path: str, params: dict[str, str]) -> web.StreamResponse:
        if self.prometheus_url is None:
            raise EntryError(503, "This region's Prometheus is not configured.")
        url = self.prometheus_url.rstrip("/") + path
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with self.session.get(url, params=params, timeout=timeout) as answer:
                body = await answer.read()
                content_type = answer.content_type or "application/json"
                return web.Response(status=answer.status, body=body, content_type=content_type)
        except (aiohttp.ClientError, TimeoutError) as error:
            log.warning("Prometheus at %s did not answer: %s", url, error)
            raise EntryError(502, "This region's Prometheus did not answer.") from None


async def _params(request: web.Request) -> dict[str, str]:
    """The query string's parameters, and a POSTed form's over them (bounded in size)."""
    params = {k: v for k, v in request.query.items()}
    if request.method != "POST":
        return params
    raw = await request.content.read(MAX_FORM_BYTES + 1)  # never more, chunked or not
    if len(raw) > MAX_FORM_BYTES:
        raise EntryError(413, f"The form is larger than {MAX_FORM_BYTES} bytes.")
    try:
        form = parse_qsl(raw.decode(), strict_parsing=False)
    except UnicodeDecodeError:
        raise EntryError(400, "The form is not UTF-8.") from None
    return params | dict(form)
