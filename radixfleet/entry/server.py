"""The region entry's HTTP application in a cluster.

A request names a model; its API key names the tenant (the gate, `gate.py`). The entry finds
that tenant's model (`routes.py`), picks a revision by KServe's traffic split (and a canary's
baseline beside it, `routes.py`), and sends the request to the revision's router
(`<revision>-router:8000`, `<revision>-baseline-router` for a baseline; smg, cache-aware). A
router with no worker says so (or has no pod yet): the entry then sends the request the Knative
way, to the revision's Service with the headers an ingress adds, where Knative's
activator holds it and wakes the revision from zero, so no request is lost while the router
finds the new pod. Answers stream through; the tenant's credentials are never sent upstream.

Every answer says which revision served it and how (`x-radixfleet-revision`,
`x-radixfleet-path: router|knative`, and `x-radixfleet-pool: baseline` from a canary's
baseline), for the platform team's debugging and the tests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp import web

from radixfleet import dataplane
from radixfleet.dataplane import openai
from radixfleet.dataplane.errors import EntryError, model_not_found
from radixfleet.dataplane.gate import TENANT, EntryGate
from radixfleet.dataplane.prefixes import HotPrefixes
from radixfleet.dataplane.relay import (
    FAILED_BEFORE_ANSWERING,
    NOT_REACHED,
    PROXIED_PATHS,
    entry_application,
    parse_body,
    relay,
)
from radixfleet.dataplane.routes import ModelRoute, Routes, Target
from radixfleet.dataplane.signals import SignalsRelay
from radixfleet.labels import SERVING_POOL

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
# smg's answers when it has no worker for the revision: 503 `no_available_workers` before it
# ever had one, 404 `model_not_found` once its last worker has gone (seen on the test cluster).
NO_WORKERS = {(503, "no_available_workers"), (404, "model_not_found")}


@dataclass
class Upstreams:
    """Where a revision is reached: its router, and its Knative Service (the activator at zero)."""

    cluster_domain: str = "cluster.local"
    router_port: int = dataplane.ROUTER_PORT

    def router(self, target: Target) -> str:
        name = dataplane.router_name(target.revision, target.pool)
        return f"http://{name}.{self._svc(target)}:{self.router_port}"

    def knative(self, target: Target) -> str:
        return f"http://{target.revision}.{self._svc(target)}"

    def _svc(self, target: Target) -> str:
        return f"{target.namespace}.svc.{self.cluster_domain}"


@dataclass
class ClusterEntry:
    """The aiohttp application; `routes` is replaced whole by the sync loop (`kube.py`)."""

    gate: EntryGate
    session: aiohttp.ClientSession
    upstreams: Upstreams = field(default_factory=Upstreams)
    wake_timeout_s: float = 600.0
    draw: Callable[[], float] = field(default_factory=lambda: random.Random().random)
    routes: Routes | None = None  # None until the first sync: every request gets 503
    # By namespace: the data plane's keys by name (two while a rotation runs).
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    # By (namespace, revision): the name of the key the revision took last.
    revision_keys: dict[tuple[str, str], str] = field(default_factory=dict)
    signals: SignalsRelay | None = None  # the fleet's failover reads this region's Prometheus
    prefixes: HotPrefixes | None = None  # what each model's prompts began with (pre-warming)

    def app(self) -> web.Application:
        app = entry_application()
        app.add_routes([web.post(path, self.proxy) for path in PROXIED_PATHS])
        app.add_routes([web.get("/v1/models", self.models), web.get("/health", self.health),
                        web.get("/v1/models/{model}", self.model)])  # fmt: skip
        # Inside the error middleware: a refused request costs nothing. The gate charges the
        # model this entry will resolve, so leaving `model` out never skips its budget.
        self.gate.install(app, model_of=lambda tenant, body: self._route(tenant, body).model)
        if self.signals is not None:
            self.signals.install(app)
        if self.prefixes is not None:
            self.prefixes.install(app)
        return app

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """Forward a generation request to the revision that serves the tenant's model."""
        raw = await request.read()
        body = parse_body(raw)
        route = self._route(request[TENANT], body)
        if request.path.startswith("/v1/") and body.get("model") != route.model:
            raw = json.dumps({**body, "model": route.model}).encode()
        target = route.pick(self.draw() * 100)
        if self.prefixes is not None:
            self.prefixes.record(route.namespace, route.model, body)
        if target is None:
            raise self._unavailable(f"The model '{route.model}' has no ready revision yet.")
        return await self._forward(request, target, raw)

    async def models(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's model list: the caller's own models (401 without a known key)."""
        tenant = self._tenant(request)
        routes = self.routes.of(tenant) if self.routes else []
        return web.json_response({"object": "list", "data": [_model_object(r) for r in routes]})

    async def model(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's `GET /v1/models/{model}`: one of the caller's models, else 404."""
        tenant, name = self._tenant(request), request.match_info["model"]
        route = self.routes.resolve(tenant, name) if self.routes else None
        if route is None:
            raise model_not_found(name)
        return web.json_response(_model_object(route))

    def _tenant(self, request: web.Request) -> str:
        tenant = self.gate.tenant_of(request)
        if tenant is None:
            raise EntryError(401, "Unknown or missing API key.")
        return tenant

    async def health(self, _request: web.Request) -> web.StreamResponse:
        """200 once the entry has read the cluster (Route 53 and the load balancer ask this)."""
        return web.Response(status=200 if self.routes is not None else 503)

    def _route(self, tenant: str, body: dict[str, Any]) -> ModelRoute:
        if self.routes is None:
            raise self._unavailable("The entry is starting; retry shortly.")
        name = body.get("model")
        owned = self.routes.of(tenant)
        if (name is None or name == "default") and len(owned) == 1:
            return owned[0]
        if not isinstance(name, str) or not name:
            raise EntryError(400, "Field 'model' is required.", param="model")
        route = self.routes.resolve(tenant, name)
        if route is None:  # another tenant's model looks exactly like no model at all
            raise model_not_found(name)
        return route

    async def _forward(
        self, request: web.Request, target: Target, raw: bytes
    ) -> web.StreamResponse:
        served = {"x-radixfleet-revision": f"{target.namespace}/{target.revision}"}
        if target.pool != SERVING_POOL:
            served["x-radixfleet-pool"] = target.pool
        try:
            return await self._answer(request, target, raw, served, may_resend=True)
        except FAILED_BEFORE_ANSWERING as err:
            # The client has seen nothing, so once more (as the local fleet's entry does); a
            # second loss is the client's 502. A router pod replaced under a request (a
            # rollout, a revision's router parked or started) failed it with a 502 at once.
            log.warning("%s/%s answered nothing before it failed (%s: %s); sent again",
                        target.namespace, target.revision, type(err).__name__, err)  # fmt: skip
            return await self._answer(request, target, raw, served, may_resend=False)

    async def _answer(
        self, request: web.Request, target: Target, raw: bytes, served: dict[str, str],
        *, may_resend: bool,
    ) -> web.StreamResponse:  # fmt: skip
        """The revision's router's answer, else (no worker, not reachable) the Knative way's."""
        answer = await self._through_router(request, target, raw, served, may_resend=may_resend)
        if answer is not None:
            return answer
        return await self._through_knative(request, target, raw, served, may_resend=may_resend)

    async def _through_router(
        self, request: web.Request, target: Target, raw: bytes, served: dict[str, str],
        *, may_resend: bool,
    ) -> web.StreamResponse | None:  # fmt: skip
        """The revision's router's answer, or None if it has no worker or is not reachable."""
        url = self.upstreams.router(target) + request.path
        relayed = {**served, "x-radixfleet-path": "router"}
        try:
            async with self._post(target, url, raw, _request_id(request)) as upstream:
                if await _no_workers(upstream):
                    return None
                return await relay(request, upstream, relayed, may_resend=may_resend)
        except NOT_REACHED as err:
            log.info("router of %s/%s not reachable (%s)", target.namespace, target.revision,
                     type(err).__name__)  # fmt: skip
            return None

    async def _through_knative(
        self, request: web.Request, target: Target, raw: bytes, served: dict[str, str],
        *, may_resend: bool,
    ) -> web.StreamResponse:  # fmt: skip
        headers = {**_request_id(request), "Knative-Serving-Revision": target.revision,
                   "Knative-Serving-Namespace": target.namespace}  # fmt: skip
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.wake_timeout_s)
        url = self.upstreams.knative(target) + request.path
        try:
            async with self._post(target, url, raw, headers, timeout=timeout) as up:
                relayed = {**served, "x-radixfleet-path": "knative"}
                return await relay(request, up, relayed, may_resend=may_resend)
        except (aiohttp.ClientConnectorError, TimeoutError):
            raise self._unavailable(f"Revision {target.revision} is not reachable.") from None

    def keys_of(self, namespace: str) -> list[str]:
        """The data plane's keys of `namespace`, as last read from the cluster."""
        return list(self.keys.get(namespace, {}).values())

    @contextlib.asynccontextmanager
    async def _post(
        self, target: Target, url: str, raw: bytes, headers: dict[str, str], **options: Any
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST `raw` upstream with a data-plane key of the target's namespace (never the
        tenant's): the one its revision took last, then, on a 401, the others. A revision
        holds one key of the Secret (radixfleet.dataplane), and during a rotation the
        Secret holds two; a 401 comes before any work, so trying again costs nothing. 503
        while the namespace's keys are not known yet; 502 when the revision refuses them all
        (the platform's fault, not the caller's: never relayed as the caller's 401)."""
        named = self.keys.get(target.namespace)
        if not named:
            raise self._unavailable(f"The data plane of {target.namespace} is not ready yet.")
        pinned = (target.namespace, target.revision)
        order = sorted(named, key=lambda name: (name != self.revision_keys.get(pinned), name))
        for name in order:
            sent = {**_JSON, **headers, **dataplane.bearer(named[name])}
            upstream = await self.session.post(url, data=raw, headers=sent, **options)
            if upstream.status != HTTPStatus.UNAUTHORIZED:
                break
            upstream.release()
        else:
            log.error("%s/%s refused every data-plane key of its namespace (%s)",
                      target.namespace, target.revision, ", ".join(order))  # fmt: skip
            raise EntryError(502, f"The data plane of {target.namespace} refused the entry.")
        self.revision_keys[pinned] = name
        try:
            yield upstream
        finally:
            upstream.release()

    def _unavailable(self, message: str) -> EntryError:
        return EntryError(503, message, headers={"Retry-After": str(RETRY_AFTER_S)})


_JSON = {"Content-Type": "application/json"}


def _request_id(request: web.Request) -> dict[str, str]:
    return {openai.REQUEST_ID: openai.request_id(request)}


def _model_object(route: ModelRoute) -> dict[str, Any]:
    return openai.model_object(route.model, created=route.created, owned_by=route.tenant)


async def _no_workers(upstream: aiohttp.ClientResponse) -> bool:
    """Whether smg answered that it has no worker for the revision (now)."""
    if upstream.status not in {status for status, _ in NO_WORKERS}:
        return False
    return router_has_no_worker(upstream.status, await upstream.read())


def router_has_no_worker(status: int, body: bytes) -> bool:
    """Whether a router's answer says it has no worker to send to."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    error = answer.get("error") if isinstance(answer, dict) else None
    return isinstance(error, dict) and (status, error.get("code")) in NO_WORKERS
