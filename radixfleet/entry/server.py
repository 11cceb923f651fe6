"""The region entry's backend in a cluster, behind the one front (radixfleet/dataplane/front.py).

A request names a model; its API key names the tenant (the gate, `gate.py`). The front resolves
that tenant's model among its own (`routes.py`); the backend picks a revision by KServe's traffic
split (and a canary's baseline beside it, `routes.py`), and sends the request to the revision's
router (`<revision>-router:8000`, `<revision>-baseline-router` for a baseline; smg, cache-aware). A
router with no worker says so (or has no pod yet): the entry then sends the request the Knative
way, to the revision's Service with the headers an ingress adds, where Knative's activator holds it
and wakes the revision from zero, so no request is lost while the router finds the new pod. Answers
stream through; the tenant's credentials are never sent upstream.

A Standard-mode model (raw Deployments, a multi-node model among them) has one router, for its
head (`<isvc>-predictor-router`), and no Knative way: it never scales to zero, so a router with no
worker (the head not ready yet, its ranks still joining) is the caller's 503 with Retry-After.

A prefill/decode model has one router, `<model>-router` (smg in PD mode, over both roles), and
no Knative way of its own: sent to one role's revision, a request would be half served. When its
router has no worker (the pair at zero, or one role gone), the entry wakes every revision of both
roles through Knative's activator (a `GET /health` each, held there until a pod of that revision
is ready), and then offers the request to the router until it takes it, so the request is never
lost and never reaches a decode without a prefill peer.

A LoRA model's adapters are listed as models, `BASE:ADAPTER` (`routes.py`), so the front takes
both of SGLang's spellings (that name, or `lora_path` beside the base's) and refuses another
tenant's adapter as no model at all. smg 1.13 knows models only by its workers' registered name
(`BASE:ADAPTER` is its 404 "No worker available for model") and hands `lora_path` to the worker
it picks: the request goes to the base's router as `model: BASE, lora_path: ADAPTER`. Any worker
will do, since every replica of a revision preloads the adapters its InferenceService names.

Every answer says which revision served it and how (`x-radixfleet-revision`,
`x-radixfleet-path: router|knative`, and `x-radixfleet-pool: baseline` from a canary's
baseline), for the platform team's debugging and the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp import web

from radixfleet import dataplane
from radixfleet.dataplane import openai
from radixfleet.dataplane.errors import EntryError, model_not_found
from radixfleet.dataplane.front import Front, Models
from radixfleet.dataplane.gate import EntryGate
from radixfleet.dataplane.prefixes import HotPrefixes
from radixfleet.dataplane.relay import FAILED_BEFORE_ANSWERING, NOT_REACHED, relay
from radixfleet.dataplane.routes import ModelRoute, Routes, Target, split_adapter
from radixfleet.dataplane.signals import SignalsRelay
from radixfleet.dataplane.tokens import RouterTokenizers
from radixfleet.labels import SERVING_POOL

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
# How often a woken prefill/decode model's router is offered the request again, until smg's
# discovery has seen both roles' new pods ready (its watch sees a pod within a second or two).
PD_ROUTER_POLL_S = 0.5
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
    tokenizers: RouterTokenizers = field(init=False)

    def __post_init__(self) -> None:
        self.tokenizers = RouterTokenizers(self.session)

    def app(self) -> web.Application:
        """The entry's application: the one front (radixfleet/dataplane/front.py) over this."""
        extras = [part for part in (self.signals, self.prefixes) if part is not None]
        return Front(self, gate=self.gate, extras=extras).app()

    def models_of(self, tenant: str | None) -> Models | None:
        """The tenant's models, as the last sync read them (None before the first)."""
        if self.routes is None:
            return None
        owned = self.routes.of(tenant) if tenant is not None else []
        models = {route.model: _model_object(route) for route in owned}
        adapters = {f"{route.model}:{adapter}": _model_object(route, adapter=adapter)
                    for route in owned for adapter in route.adapters}  # fmt: skip
        return models | adapters

    async def forward(
        self, request: web.Request, tenant: str | None, model: str, body: dict[str, Any],
        raw: bytes,
    ) -> web.StreamResponse:  # fmt: skip
        """Send the request to the revision KServe's split picks for the tenant's model (a
        LoRA adapter's to its base's, naming the adapter as smg passes it on)."""
        route = self._route(tenant, model)
        if route is None:  # the routes were replaced since the front resolved the model
            raise model_not_found(model)
        _, adapter = split_adapter(model)
        if adapter is not None:
            body = {**body, "model": route.model, "lora_path": adapter}
            raw = json.dumps(body).encode()
        if self.prefixes is not None:
            self.prefixes.record(route.namespace, route.model, body)
        target = route.pick(self.draw() * 100)
        if target is None:
            raise self.unavailable(f"The model '{route.model}' has no ready revision yet.")
        return await self._forward(request, target, raw)

    async def count_prompt(self, tenant: str, model: str, texts: Sequence[str]) -> int | None:
        """`texts`' tokens by the tokenizer of the router of `model`'s largest share (a canary
        that changed tokenizers is settled to what its replicas count)."""
        route = self._route(tenant, model)
        if route is None or not route.targets:
            return None
        target = max(route.targets, key=lambda t: t.percent)
        named = self.keys.get(target.namespace) or {}
        keys = [dataplane.bearer(named[name]) for name in self._key_order(target)]
        if not keys:
            return None
        return await self.tokenizers.count(self.upstreams.router(target), texts, credentials=keys)

    def _route(self, tenant: str | None, model: str) -> ModelRoute | None:
        """The tenant's model, or the base of the tenant's adapter `BASE:ADAPTER`."""
        if self.routes is None or tenant is None:
            return None
        base, adapter = split_adapter(model)
        route = self.routes.resolve(tenant, base)
        if route is None or (adapter is not None and adapter not in route.adapters):
            return None
        return route

    def healthy(self) -> bool:
        """Once the entry has read the cluster (Route 53 and the load balancer ask)."""
        return self.routes is not None

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
        if target.wakes:
            return await self._after_waking(request, target, raw, served, may_resend=may_resend)
        if not target.knative:
            raise self.unavailable(f"The model's head {target.revision} is not ready yet.")
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

    async def _after_waking(
        self, request: web.Request, target: Target, raw: bytes, served: dict[str, str],
        *, may_resend: bool,
    ) -> web.StreamResponse:  # fmt: skip
        """A prefill/decode model's answer once both roles are awake: every role's revision
        woken through the activator, then the router offered the request until it has workers
        (or the wake's time is up: the caller's 503 with Retry-After). The roles are woken again
        before each offer: a `/health` through the activator is what keeps Knative from taking a
        role back to zero while the router is still admitting its pods (on a busy node that can
        take longer than the scale-down window), and it wakes a role that went back."""
        deadline = asyncio.get_running_loop().time() + self.wake_timeout_s
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.gather(*(self._wake(target, revision) for revision in target.wakes))
            answer = await self._through_router(request, target, raw, served,
                                                may_resend=may_resend)  # fmt: skip
            if answer is not None:
                return answer
            await asyncio.sleep(PD_ROUTER_POLL_S)
        raise self.unavailable(f"The model {target.revision} has not woken yet.")

    async def _wake(self, target: Target, revision: str) -> None:
        """Hold until `revision` has a ready pod: a `GET /health` through Knative's activator
        (SGLang answers it without work; the activator holds it while it scales from zero)."""
        woken = Target(target.namespace, revision, 0)
        headers = {"Knative-Serving-Revision": revision,
                   "Knative-Serving-Namespace": target.namespace}  # fmt: skip
        timeout = aiohttp.ClientTimeout(total=self.wake_timeout_s, sock_connect=10)
        url = self.upstreams.knative(woken) + "/health"
        try:
            async with self.session.get(url, headers=headers, timeout=timeout) as answer:
                if answer.status >= HTTPStatus.INTERNAL_SERVER_ERROR:
                    raise self.unavailable(f"Revision {revision} did not wake ({answer.status}).")
        except (aiohttp.ClientConnectorError, TimeoutError):
            raise self.unavailable(f"Revision {revision} is not reachable.") from None

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
            raise self.unavailable(f"Revision {target.revision} is not reachable.") from None

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
            raise self.unavailable(f"The data plane of {target.namespace} is not ready yet.")
        order = self._key_order(target)
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
        self.revision_keys[(target.namespace, target.revision)] = name
        try:
            yield upstream
        finally:
            upstream.release()

    def _key_order(self, target: Target) -> list[str]:
        """The names of the target namespace's data-plane keys: the one its revision took last
        first, then the others."""
        pinned = self.revision_keys.get((target.namespace, target.revision))
        return sorted(self.keys.get(target.namespace, {}), key=lambda name: (name != pinned, name))

    def unavailable(self, message: str) -> EntryError:
        return EntryError(503, message, headers={"Retry-After": str(RETRY_AFTER_S)})


_JSON = {"Content-Type": "application/json"}


def _request_id(request: web.Request) -> dict[str, str]:
    return {openai.REQUEST_ID: openai.request_id(request)}


def _model_object(route: ModelRoute, *, adapter: str | None = None) -> dict[str, Any]:
    """OpenAI's model object of the route's model, or of one of its adapters (whose `parent`
    is the base, as SGLang lists an adapter)."""
    if adapter is None:
        return openai.model_object(route.model, created=route.created, owned_by=route.tenant)
    name = f"{route.model}:{adapter}"
    found = openai.model_object(name, created=route.created, owned_by=route.tenant)
    return {**found, "parent": route.model}


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
