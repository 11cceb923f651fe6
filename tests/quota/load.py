"""A noisy-tenant load run: tenants stream chat completions through the token gate to one
emulated SGLang replica, each at its own rate, and every request's TTFT and outcome is kept.

The replica is the project's emulator, slowed down (`time_factor`) and given a small batch so that
it saturates under a load a two-core machine can generate; in front of it runs the local fleet's
own region entry (`radixfleet.localfleet.entry`), with or without the gate installed, routing
straight to the replica (one replica needs no gateway). Arrivals are open-loop on a fixed seeded
schedule, the same in both arms.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from radixfleet.config.catalog import TokenBudget
from radixfleet.controllers.quota.gate import TokenGate
from radixfleet.controllers.quota.ledger import DEFAULT_BURST_SECONDS, TokenLedger
from radixfleet.controllers.quota.metrics import TokenMetrics
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.localfleet.entry import RegionEntry
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState
from radixfleet.profile import ReplicaProfile

MODEL = "llama"
WORDS = ("fleet", "radix", "token", "budget", "tenant", "replica", "prefix", "router", "quota")


@dataclass(frozen=True)
class TenantLoad:
    name: str
    tokens_per_minute: int  # its budget
    rate: float  # requests per second it sends
    steady: bool = True  # evenly spaced (a well-behaved client), else Poisson arrivals


@dataclass(frozen=True)
class Settings:
    prompt_chars: int = 400  # about 100 tokens
    completion_tokens: int = 16
    seconds: float = 6.0  # of arrivals
    grace: float = 2.0  # after the last arrival, before what is left counts as missed
    time_factor: float = 10.0
    max_running_requests: int = 8
    burst_seconds: float = DEFAULT_BURST_SECONDS
    seed: int = 7


@dataclass
class Outcome:
    tenant: str
    status: int | None = None  # None: still waiting at the end, or the connection failed
    ttft: float | None = None
    error: str | None = None


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)

    def of(self, tenant: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.tenant == tenant]

    def attainment(self, tenant: str, slo_s: float) -> float:
        """Share of the tenant's requests answered with a TTFT within the SLO."""
        mine = self.of(tenant)
        good = [o for o in mine if o.status == 200 and o.ttft is not None and o.ttft <= slo_s]
        return len(good) / len(mine) if mine else 1.0

    def failed(self, tenant: str) -> list[Outcome]:
        """Requests refused or broken (a 429 is a refusal; unanswered ones are not failures)."""
        return [o for o in self.of(tenant) if o.error is not None or (o.status or 200) != 200]


@contextmanager
def replica(settings: Settings, tokenizer: EmulatorTokenizer) -> Iterator[RunningEmulator]:
    profile = ReplicaProfile().scaled(time_factor=settings.time_factor)
    profile = profile.model_copy(update={"max_running_requests": settings.max_running_requests})
    config = EmulatorConfig(profile=profile, served_model_name=MODEL, port=0, warm=True)
    with serve_in_thread(config, tokenizer=tokenizer) as running:
        yield running


@dataclass
class OneReplica:
    """The entry's Scaler port for a model with one replica that is always ready."""

    region: str
    model: str
    url: str

    def desired(self) -> int:
        return 1

    def ready_count(self) -> int:
        return 1

    def replicas(self) -> list[ReplicaInfo]:
        return [ReplicaInfo("r0", self.url, ReplicaState.READY, 0.0, 0.0)]

    def scale_to(self, replicas: int) -> int:
        return 1

    def drain(self, replica_id: str) -> bool:
        return False

    async def wait_ready(self, *, at_least: int = 1, timeout_s: float) -> bool:
        return True


def gate_for(
    tenants: list[TenantLoad], settings: Settings, tokenizer: EmulatorTokenizer
) -> TokenGate:
    """The gate, counting prompts with the replica's own tokenizer in process: the entry here
    sends straight to the replica, and only a router (smg) counts for an entry."""
    budgets = {t.name: TokenBudget(tokens_per_minute=t.tokens_per_minute) for t in tenants}

    async def count(_tenant: str, _model: str, texts: Sequence[str]) -> int:
        return sum(len(tokenizer.encode(text)) for text in texts)

    return TokenGate(
        ledger=TokenLedger(budgets, burst_seconds=settings.burst_seconds),
        keys={f"key-{t.name}": t.name for t in tenants},
        metrics=TokenMetrics(region="local"),
        count=count,
    )


def schedule(tenants: list[TenantLoad], settings: Settings) -> list[tuple[float, str]]:
    """(seconds from the start, tenant) for every request, jittered but reproducible."""
    rng = random.Random(settings.seed)
    arrivals = []
    for tenant in tenants:
        gap = 1 / tenant.rate
        at = rng.uniform(0, gap)
        while at < settings.seconds:
            arrivals.append((at, tenant.name))
            at += gap * rng.uniform(0.9, 1.1) if tenant.steady else rng.expovariate(tenant.rate)
    return sorted(arrivals)


def prompt(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)


async def one(
    client: aiohttp.ClientSession,
    url: str,
    tenant: str,
    text: str,
    settings: Settings,
    out: Outcome,
) -> None:
    body = {
        "model": MODEL,
        "stream": True,
        "max_tokens": settings.completion_tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": text}],
    }
    start = time.monotonic()
    try:
        async with client.post(
            url, json=body, headers={"Authorization": f"Bearer key-{tenant}"}
        ) as answer:
            out.status = answer.status
            async for line in answer.content:
                if out.ttft is None and _has_text(line):
                    out.ttft = time.monotonic() - start
    except aiohttp.ClientError as error:
        out.error = repr(error)


def _has_text(line: bytes) -> bool:
    """Whether an SSE line carries generated text (the first chunk only names the role)."""
    if not line.startswith(b"data: {"):
        return False
    chunk = json.loads(line[6:])
    return any((c.get("delta") or {}).get("content") for c in chunk.get("choices", []))


async def drive(url: str, tenants: list[TenantLoad], settings: Settings) -> Run:
    run, rng = Run(), random.Random(settings.seed)
    tasks = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:
        start = time.monotonic()
        for at, tenant in schedule(tenants, settings):
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            out = Outcome(tenant)
            run.outcomes.append(out)
            tasks.append(
                asyncio.create_task(
                    one(client, url, tenant, prompt(rng, settings.prompt_chars), settings, out)
                )
            )
        _, pending = await asyncio.wait(tasks, timeout=settings.grace) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return run


def noisy_run(
    tenants: list[TenantLoad], settings: Settings, tokenizer: EmulatorTokenizer, *, enforce: bool
) -> tuple[Run, TokenGate]:
    gate = gate_for(tenants, settings, tokenizer)

    async def main(upstream: str) -> Run:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        entry = RegionEntry(
            region="local",
            scalers={MODEL: OneReplica("local", MODEL, upstream)},
            routers={MODEL: upstream},  # straight to the replica: no router needed for one
            session=session,
            wake_timeout_s=5.0,
            retry_after_s=1,
            gate=gate if enforce else None,
        )
        runner = web.AppRunner(entry.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            return await drive(f"http://127.0.0.1:{port}/v1/chat/completions", tenants, settings)
        finally:
            await runner.cleanup()
            await session.close()

    with replica(settings, tokenizer) as running:
        return asyncio.run(main(running.url)), gate


def tenants_at(
    budget: int, settings: Settings, *, noisy_factor: float, good_share: float
) -> list[TenantLoad]:
    """One noisy tenant at `noisy_factor` times its budget, two at `good_share` of theirs."""
    per_request = settings.prompt_chars / 4 + settings.completion_tokens  # tokens, estimated
    at_budget = budget / 60 / per_request
    return [
        TenantLoad("noisy", budget, noisy_factor * at_budget, steady=False),
        TenantLoad("a", budget, good_share * at_budget),
        TenantLoad("b", budget, good_share * at_budget),
    ]


def summary(run: Run, tenants: list[TenantLoad], slo_s: float) -> dict[str, dict[str, float]]:
    out = {}
    for tenant in tenants:
        mine = run.of(tenant.name)
        ttfts = sorted(o.ttft for o in mine if o.ttft is not None)
        out[tenant.name] = {
            "requests": len(mine),
            "ok": sum(o.status == 200 for o in mine),
            "throttled": sum(o.status == 429 for o in mine),
            "unanswered": sum(o.status is None for o in mine),
            "ttft_p95_s": round(ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))], 3)
            if ttfts
            else -1.0,
            "slo_attainment": round(run.attainment(tenant.name, slo_s), 3),
        }
    return out


def main() -> None:
    """Both arms side by side, same schedule and seed: `uv run python -m tests.quota.load`."""
    from radixfleet.emulator.tokenizer import load_tokenizer

    settings, slo = Settings(seconds=8.0), 1.0
    tenants = tenants_at(6000, settings, noisy_factor=10, good_share=0.7)
    tokenizer = load_tokenizer()
    result = {"slo_ttft_s": slo, "settings": settings.__dict__}
    for arm, enforce in (("enforced", True), ("unenforced", False)):
        run, _ = noisy_run(tenants, settings, tokenizer, enforce=enforce)
        result[arm] = summary(run, tenants, slo)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
