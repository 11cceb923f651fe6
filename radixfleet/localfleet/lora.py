"""Which replica of a LoRA model serves a request for an adapter, loading it there on demand.

A request names an adapter as SGLang's OpenAI routes take it (`model: "BASE:ADAPTER"`, or
`lora_path`; the front turns the second into the first). smg 1.13 picks a worker without regard
to the adapter (its HTTP routers' tree is keyed on the prompt's text, and over gRPC it drops
`lora_path`; radixfleet/controllers/lora/README.md), so the local fleet's entry routes an
adapter's requests itself: to a ready replica that holds the adapter, the same one for the same
prompt opening among several (a rendezvous hash, as the entry spreads router replicas: the
replica that served a prefix under this adapter holds its KV). When no replica holds it, the
request is not refused: the `AdapterPlacer` (the LoRA controller's choice,
radixfleet/controllers/lora/localfleet.py) says where to load it, the router calls SGLang's
`POST /load_lora_adapter` (after `/unload_lora_adapter` for a slot it frees) and holds the
request until the load is done, for at most `load_timeout_s` (then 503, Retry-After, in
OpenAI's error shape). Requests for one adapter waiting together share one load.

What a replica holds is what this router loaded there: every load and unload of the local fleet
goes through it (the controller's periodic pass too, `apply`), and a replica that is no longer
ready is forgotten with what it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from radixfleet.dataplane.errors import EntryError
from radixfleet.localfleet.scaler import ReplicaState, Scaler
from radixfleet.localfleet.spec import ModelSpec

Verb = Literal["load", "unload"]
# Where an adapter's weights would be in a replica's pod (the rendered InferenceService mounts
# each at /mnt/adapters/NAME); an emulated replica only records the path.
ADAPTER_DIR = "/mnt/adapters"
RATE_WINDOW_S = 30.0  # the recent request rate an adapter's copies are sized by


@dataclass(frozen=True)
class Holding:
    """One ready replica's adapters, as the router knows them: each with when it was loaded
    (unix seconds), and the requests for each running there now."""

    replica: str  # its URL
    loaded: Mapping[str, float]
    running: Mapping[str, int]


@dataclass(frozen=True)
class AdapterDemand:
    """One adapter's demand: requests per second over the last `RATE_WINDOW_S`, requests held
    waiting for a holder, and the time of its last request (None: never)."""

    adapter: str
    rps: float
    waiting: int
    last_request_at: float | None


@dataclass(frozen=True)
class AdapterAction:
    verb: Verb
    replica: str  # its URL
    adapter: str


class AdapterPlacer(Protocol):
    """Where to load an adapter that a request waits for (the LoRA controller's decision)."""

    def place(
        self, model: ModelSpec, holdings: Sequence[Holding], demand: Sequence[AdapterDemand],
        *, adapter: str, now: float,
    ) -> Sequence[AdapterAction]: ...  # fmt: skip


class AdapterError(RuntimeError):
    """A replica refused a load or unload; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class AdapterStats:
    """What the demo reports of a LoRA model: requests by adapter, loads and unloads, and how
    many adapter requests a holder answered (a replica without the adapter refuses with 400)."""

    requests: Counter[str] = field(default_factory=Counter)
    loads: int = 0
    unloads: int = 0
    on_demand_loads: int = 0
    answered_by_holder: int = 0
    refused: int = 0

    @property
    def holder_fraction(self) -> float:
        total = self.answered_by_holder + self.refused
        return self.answered_by_holder / total if total else 0.0


class AdapterRouter:
    """One LoRA model's adapters over its replicas in one region (see the module's docstring)."""

    def __init__(
        self, *, model: ModelSpec, scaler: Scaler, session: aiohttp.ClientSession,
        placer: AdapterPlacer, load_timeout_s: float, retry_after_s: int,
    ) -> None:  # fmt: skip
        self.model = model
        self.scaler = scaler
        self.session = session
        self.placer = placer
        self.load_timeout_s = load_timeout_s
        self.retry_after_s = retry_after_s
        self.stats = AdapterStats()
        self._loaded: dict[str, dict[str, float]] = {}  # replica URL -> adapter -> loaded at
        self._running: Counter[tuple[str, str]] = Counter()
        self._waiting: Counter[str] = Counter()
        self._arrivals: dict[str, deque[float]] = {}
        self._placing: dict[str, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()  # one change of the replicas' adapters at a time

    @property
    def adapters(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.model.lora_adapters)

    # -- the request path --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self, adapter: str, body: Mapping[str, Any]) -> AsyncIterator[str]:
        """The URL of a replica holding `adapter` for this request, loading it on demand; the
        request counts as running there until the block ends (it is never unloaded under it)."""
        self._arrived(adapter)
        self._waiting[adapter] += 1
        try:
            replica = await self._holder(adapter, body)
        finally:
            self._waiting[adapter] -= 1
        self._running[(replica, adapter)] += 1
        try:
            yield replica
        finally:
            self._running[(replica, adapter)] -= 1

    def answered(self, status: int) -> None:
        """Count the replica's answer to an adapter request."""
        if status == 400:
            self.stats.refused += 1
        elif status < 400:
            self.stats.answered_by_holder += 1

    async def _holder(self, adapter: str, body: Mapping[str, Any]) -> str:
        deadline = time.monotonic() + self.load_timeout_s
        while not (holders := self._holders(adapter)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timeout(adapter)
            task = self._placing.get(adapter)
            if task is None or task.done():
                task = asyncio.get_running_loop().create_task(self._place(adapter))
                self._placing[adapter] = task
            done, _ = await asyncio.wait({task}, timeout=remaining)
            if not done:
                raise self._timeout(adapter)
            if task.exception() is not None:
                raise self._refused(adapter, task.exception())
            if not self._holders(adapter):
                await asyncio.sleep(min(0.05, max(remaining, 0)))  # no slot yet: ask again
        opening = _opening(body)
        return max(holders, key=lambda url: _weight(url, adapter, opening))

    def _holders(self, adapter: str) -> list[str]:
        return [url for url in self._ready() if adapter in self._loaded.get(url, {})]

    async def _place(self, adapter: str) -> None:
        if self.scaler.ready_count() == 0:
            return  # the entry wakes the model first; nothing to load onto yet
        actions = self.placer.place(self.model, self.holdings(), self.demand(), adapter=adapter,
                                    now=time.time())  # fmt: skip
        self.stats.on_demand_loads += sum(a.verb == "load" for a in actions)
        await self.apply(actions)

    def _timeout(self, adapter: str) -> EntryError:
        return EntryError(
            503, f"The LoRA adapter '{adapter}' of '{self.model.name}' is loading; retry shortly.",
            headers={"Retry-After": str(self.retry_after_s)}, code="adapter_loading",
        )  # fmt: skip

    def _refused(self, adapter: str, error: BaseException | None) -> EntryError:
        return EntryError(
            503, f"The LoRA adapter '{adapter}' could not be loaded: {error}",
            headers={"Retry-After": str(self.retry_after_s)}, code="adapter_unavailable",
        )  # fmt: skip

    # -- what the controller reads and asks --------------------------------------------------

    def holdings(self) -> list[Holding]:
        """Each ready replica's adapters and the requests running on them."""
        ready = self._ready()
        for gone in set(self._loaded) - set(ready):
            del self._loaded[gone]  # a replica that left took its adapters with it
        return [Holding(url, dict(self._loaded.get(url, {})), self._running_on(url))
                for url in ready]  # fmt: skip

    def demand(self, now: float | None = None) -> list[AdapterDemand]:
        """Each adapter's recent rate, waiting requests and last request."""
        now = time.time() if now is None else now
        found = []
        for adapter in self.adapters:
            arrivals = self._arrivals.get(adapter, deque())
            recent = sum(1 for t in arrivals if now - t <= RATE_WINDOW_S)
            last = arrivals[-1] if arrivals else None
            found.append(AdapterDemand(adapter, recent / RATE_WINDOW_S, self._waiting[adapter],
                                       last))  # fmt: skip
        return found

    async def apply(self, actions: Sequence[AdapterAction]) -> None:
        """Carry out loads and unloads in order; one already done is skipped (idempotent)."""
        async with self._lock:
            for action in actions:
                await self._act(action)

    async def _act(self, action: AdapterAction) -> None:
        held = self._loaded.setdefault(action.replica, {})
        if (action.adapter in held) == (action.verb == "load"):
            return
        if action.verb == "load":
            await self._call(action)
            held[action.adapter] = time.time()
            self.stats.loads += 1
            return
        if self._running[(action.replica, action.adapter)] > 0:
            return  # a request started on it since the decision: it stays
        loaded_at = held.pop(action.adapter)  # no new request picks it while it goes
        try:
            await self._call(action)
        except AdapterError:
            held[action.adapter] = loaded_at
            raise
        self.stats.unloads += 1

    async def _call(self, action: AdapterAction) -> None:
        name = action.adapter
        body = {"lora_name": name} | ({"lora_path": f"{ADAPTER_DIR}/{name}"}
                                      if action.verb == "load" else {})  # fmt: skip
        url = f"{action.replica}/{action.verb}_lora_adapter"
        try:
            async with self.session.post(url, json=body) as answer:
                found = await answer.json(content_type=None)
                if answer.status != 200 or not found.get("success", False):
                    raise AdapterError(f"{action.verb} {name} on {action.replica}: {found}",
                                       status=answer.status)  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise AdapterError(f"{action.verb} {name} on {action.replica}: {error}") from error

    # -- bookkeeping -------------------------------------------------------------------------

    def _ready(self) -> list[str]:
        return [r.url for r in self.scaler.replicas() if r.state is ReplicaState.READY]

    def _running_on(self, url: str) -> dict[str, int]:
        return {a: n for (replica, a), n in self._running.items() if replica == url and n > 0}

    def _arrived(self, adapter: str) -> None:
        self.stats.requests[adapter] += 1
        arrivals = self._arrivals.setdefault(adapter, deque())
        now = time.time()
        arrivals.append(now)
        while arrivals and now - arrivals[0] > RATE_WINDOW_S:
            arrivals.popleft()


def adapter_routers(
    models: Sequence[ModelSpec], scalers: Mapping[str, Scaler], *,
    session: aiohttp.ClientSession, placer: AdapterPlacer | None, load_timeout_s: float,
    retry_after_s: int,
) -> dict[str, AdapterRouter]:  # fmt: skip
    """An adapter router for each LoRA model of a region; a LoRA model needs a placer."""
    lora = [m for m in models if m.lora_adapters]
    if lora and placer is None:
        raise ValueError(f"LoRA models {[m.name for m in lora]} need an adapter placer"
                         " (radixfleet/controllers/lora/localfleet.py)")  # fmt: skip
    return {m.name: AdapterRouter(model=m, scaler=scalers[m.name], session=session,
                                  placer=placer, load_timeout_s=load_timeout_s,
                                  retry_after_s=retry_after_s)
            for m in lora if placer is not None}  # fmt: skip


def _opening(body: Mapping[str, Any]) -> str:
    prompt = body.get("messages", body.get("prompt", body.get("text", "")))
    return str(prompt)[:1024]


def _weight(url: str, adapter: str, opening: str) -> bytes:
    # Rendezvous hashing: a prompt opening keeps its holder while the holders stay.
    return hashlib.blake2b(f"{url}\n{adapter}\n{opening}".encode(), digest_size=8).digest()
