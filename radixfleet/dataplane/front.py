"""The one front of every region entry: the routes a client calls, and the rules they share.

Both entries, the cluster's (radixfleet/entry/server.py) and the local fleet's
(radixfleet/localfleet/entry.py), serve one surface through `Front`: the generation routes
(`PROXIED_PATHS`), OpenAI's model list and model, and health, inside the error middleware
(`relay.entry_application`). With a gate, every route but health answers a known key only, and a
tenant sees and reaches its own models only: another tenant's model answers exactly as no model
at all. A request that names no model is served by the tenant's only model, and refused (400)
when it has several. What differs between the two entries is behind the `Backend` port: which
models a tenant has, and where a request for one goes (the cluster's revisions, through their
routers or Knative's activator; the local fleet's routers, waking its replicas).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from radixfleet.dataplane.errors import EntryError, model_not_found
from radixfleet.dataplane.gate import TENANT, Gate
from radixfleet.dataplane.relay import PROXIED_PATHS, entry_application, parse_body
from radixfleet.dataplane.routes import split_adapter

# By model name: OpenAI's model object of each model a tenant may call.
Models = Mapping[str, Mapping[str, Any]]
UNNAMED = (None, "", "default")  # a request that leaves the choice of model to the entry


class Backend(Protocol):
    """Where an entry's requests go, and what it knows of the models behind it."""

    def models_of(self, tenant: str | None) -> Models | None:
        """The models `tenant` may call (None: no gate, so every model); None while the entry
        cannot tell yet (it has not read the cluster): every request then gets 503."""
        ...

    async def forward(
        self, request: web.Request, tenant: str | None, model: str, body: dict[str, Any],
        raw: bytes,
    ) -> web.StreamResponse:  # fmt: skip
        """The answer of `model` to the request (`raw`, its `model` already the one resolved)."""
        ...

    async def count_prompt(self, tenant: str, model: str, texts: Sequence[str]) -> int | None:
        """The tokens of `texts` by `model`'s tokenizer (its router's); None if it cannot
        count them now (the gate then charges a bound no tokenizer exceeds)."""
        ...

    def healthy(self) -> bool:
        """Whether a load balancer should send this entry requests."""
        ...

    def unavailable(self, message: str) -> EntryError:
        """A 503 with the backend's `Retry-After`."""
        ...


class Installable(Protocol):
    """A part of the entry with routes of its own (the fleet's signals, the hot prefixes)."""

    def install(self, app: web.Application) -> None: ...


class Front:
    """The aiohttp application of a region entry over its backend."""

    def __init__(
        self, backend: Backend, *, gate: Gate | None, extras: Sequence[Installable] = ()
    ) -> None:
        self.backend = backend
        self.gate = gate
        self.extras = tuple(extras)

    def app(self) -> web.Application:
        app = entry_application()
        app.add_routes([web.post(path, self.proxy) for path in PROXIED_PATHS])
        app.add_routes([web.get("/v1/models", self.models), web.get("/health", self.health),
                        web.get("/v1/models/{model}", self.model)])  # fmt: skip
        if self.gate is not None:
            # Inside the error middleware: a refused request costs nothing and wakes nothing.
            # The gate charges the model this front resolves, so leaving `model` out never
            # skips its budget, and the prompt as that model's tokenizer counts it.
            self.gate.install(app, model_of=self.model_of, count=self.backend.count_prompt)
        for extra in self.extras:
            extra.install(app)
        return app

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """Send a generation request to the model the caller's tenant resolves it to."""
        raw = await request.read()
        body = parse_body(raw)
        tenant = request.get(TENANT)
        model = self.model_of(tenant, body)
        lora = body.get("lora_path")
        if isinstance(lora, str) and ":" not in model and self._lists_adapters(tenant, model):
            # SGLang's other spelling of `BASE:ADAPTER`, where the backend lists the model's
            # adapters as models: one spelling goes on, and an adapter the tenant does not see
            # is no model of its (another tenant's answers as none at all).
            model = self._adapter_model(tenant, model, lora)
            body = {k: v for k, v in body.items() if k != "lora_path"} | {"model": model}
            raw = json.dumps(body).encode()
        if request.path.startswith("/v1/") and body.get("model") != model:
            # The router's OpenAI routes need the name the entry resolved.
            raw = json.dumps({**body, "model": model}).encode()
        return await self.backend.forward(request, tenant, model, body, raw)

    def model_of(self, tenant: str | None, body: Mapping[str, Any]) -> str:
        """The model `tenant`'s request is served by: the one it names, else its only one."""
        models = self._models(tenant)
        name = body.get("model")
        bases = [model for model in models if split_adapter(model)[0] == model]
        if name in UNNAMED and len(bases) == 1:  # a LoRA model's adapters are no other model
            return bases[0]
        if name in UNNAMED:
            raise EntryError(400, "Field 'model' is required: several models are served.",
                             param="model")  # fmt: skip
        if not isinstance(name, str) or name not in models:
            raise model_not_found(name)
        return name

    def _lists_adapters(self, tenant: str | None, model: str) -> bool:
        return any(name.startswith(f"{model}:") for name in self._models(tenant))

    def _adapter_model(self, tenant: str | None, model: str, adapter: str) -> str:
        named = f"{model}:{adapter}"
        if named not in self._models(tenant):
            raise EntryError(404, f"The LoRA adapter '{adapter}' does not exist.",
                             code="model_not_found", param="lora_path")  # fmt: skip
        return named

    async def models(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's model list: the caller's own models (401 without a known key)."""
        models = self._models(self._tenant(request))
        data = [dict(models[name]) for name in sorted(models)]
        return web.json_response({"object": "list", "data": data})

    async def model(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's `GET /v1/models/{model}`: one of the caller's models, else 404."""
        name = request.match_info["model"]
        found = self._models(self._tenant(request)).get(name)
        if found is None:
            raise model_not_found(name)
        return web.json_response(dict(found))

    async def health(self, _request: web.Request) -> web.StreamResponse:
        return web.Response(status=200 if self.backend.healthy() else 503)

    def _tenant(self, request: web.Request) -> str | None:
        if self.gate is None:
            return None
        tenant = self.gate.tenant_of(request)
        if tenant is None:
            raise EntryError(401, "Unknown or missing API key.")
        return tenant

    def _models(self, tenant: str | None) -> Models:
        models = self.backend.models_of(tenant)
        if models is None:
            raise self.backend.unavailable("The entry is starting; retry shortly.")
        return models
