"""What the region entry adds to a request, and how many streamed requests it serves per core.

The entry under test is the cluster's (`radixfleet.entry.server.ClusterEntry`, with the quota's
gate: keys, token budgets, metering, fair shares), run as its own process pinned to core 0,
with its routes and keys given instead of read from a cluster. Behind it: the real SGLang
gateway (smg 1.13.0, holding the model's tokenizer, as a cluster's routers do: the entry asks it
to count each prompt before admitting it) in front of one emulated SGLang replica whose step
times are scaled by 0.001, so the serving path is fast and the entry's work shows; both, and
this load generator, on core 1. Every request is a streamed chat (a short prompt, 8 tokens
out), sent the same way either straight to smg or through the entry, and timed to its first
content event (TTFT).

- `added`: one request at a time, alternating entry and direct, `--pairs` of each: the entry's
  added TTFT, p50 and p99 (the difference of each path's percentile). A second entry, which
  charges every prompt its byte bound instead of asking the router to count it, is timed in
  the same rotation: the difference is what counting with the model's tokenizer costs.
- `load`: closed loops of 1 to 64 concurrent clients, each level for `--seconds` through the
  entry and then direct: requests per second, TTFT percentiles, the added p99, and the entry
  process's CPU time, hence its requests per CPU-second (what one core would sustain if the
  entry were the bottleneck; here the serving path on the other core is).

Goal (issue #41): p50 added < 2 ms; >= 1,000 streamed requests/s per core before the added p99
passes 10 ms. Writes `entry_overhead.json` and `entry_overhead.png` into `--out`.

    uv run python benchmarks/entry_overhead.py [--pairs 400] [--seconds 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import matplotlib

from radixfleet.emulator.tokenizer import ensure_tokenizer_dir
from radixfleet.machine import describe_machine

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
TENANT, NAMESPACE, MODEL, KEY = "bench", "team-bench", "chat", "sk-bench"
LEVELS = (1, 4, 16, 64)
UNCOUNTED = "entry, byte bound"  # the entry that does not ask the router to count
GOAL_ADDED_P50_MS, GOAL_RPS_PER_CORE, P99_LIMIT_MS = 2.0, 1000.0, 10.0
BODY = {"model": MODEL, "stream": True, "max_tokens": 8,
        "messages": [{"role": "user", "content": "Say hello to the fleet, briefly."}]}  # fmt: skip


# -- the entry, in its own process -------------------------------------------------------------


async def _uncounted(_tenant: str, _model: str, _texts: Any) -> None:
    return None  # as a router without a tokenizer answers: the gate charges the byte bound


def serve_entry(port: int, router: str, *, loop: str, counted: bool = True) -> None:
    """The cluster entry with one tenant and one model whose revision's router is `router`, on
    asyncio's own event loop or uvloop's (`loop`); with `counted`, prompts counted by the
    router's tokenizer, else charged their byte bound."""
    from aiohttp import web

    from radixfleet import dataplane
    from radixfleet.controllers.quota.entry import ClusterGate
    from radixfleet.controllers.quota.fakes import FakeSecrets, FakeTenants
    from radixfleet.dataplane.relay import entry_runner, upstream_timeout
    from radixfleet.dataplane.routes import Target, build_routes
    from radixfleet.entry.server import ClusterEntry, Upstreams
    from radixfleet.platform import UPSTREAM_CONNECTIONS

    class OneRouter(Upstreams):
        def router(self, target: Target) -> str:
            return router

    tenants, secrets = FakeTenants(), FakeSecrets()
    tenants.add({"metadata": {"name": TENANT}, "spec": {
        "namespaces": [NAMESPACE], "tokenBudget": {"tokensPerMinute": 10**12},
        "apiKeys": [{"name": "keys", "namespace": NAMESPACE}]}})  # fmt: skip
    secrets.keys[(NAMESPACE, "keys", "api-key")] = KEY
    gate = ClusterGate(tenants, secrets, replicas=1, region="bench")
    if not counted:
        gate.gate.count = _uncounted
    isvc = {
        "metadata": {"name": MODEL, "namespace": NAMESPACE},
        "status": {
            "components": {
                "predictor": {
                    "traffic": [{"revisionName": f"{MODEL}-predictor-00001", "percent": 100}]
                }
            }
        },
    }

    async def run() -> None:
        connector = aiohttp.TCPConnector(limit=UPSTREAM_CONNECTIONS)
        async with aiohttp.ClientSession(timeout=upstream_timeout(), connector=connector) as s:
            entry = ClusterEntry(gate=gate, session=s, upstreams=OneRouter())
            entry.keys = {NAMESPACE: {dataplane.KEY: "data-plane-key"}}
            entry.routes = build_routes(gate.sync(), [isvc])
            runner = entry_runner(entry.app(), shutdown_timeout=1)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            await asyncio.Event().wait()

    if loop == "uvloop":
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # `uv run --with uvloop`

        uvloop.run(run())
    else:
        asyncio.run(run())


# -- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(command: list[str], *, core: int, log: Path) -> subprocess.Popen[bytes]:
    """`command` on one core, its output in `log`."""
    with log.open("wb") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: os.sched_setaffinity(0, {core}))  # fmt: skip


def wait_until_serving(url: str, headers: dict[str, str]) -> None:
    """Until a chat through `url` is answered (smg needs its worker healthy first)."""
    deadline = time.monotonic() + 90
    body = json.dumps({**BODY, "stream": False}).encode()
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            f"{url}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} never answered a chat")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the load ----------------------------------------------------------------------------------


async def ttft(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> float:
    """Seconds to the first event that carries content; the stream is read to its end."""
    started, first = time.perf_counter(), None
    async with session.post(f"{url}/v1/chat/completions", json=BODY, headers=headers) as answer:
        if answer.status != 200:
            raise RuntimeError(f"{url}: {answer.status} {await answer.text()}")
        async for line in answer.content:
            if first is None and line.startswith(b"data: {") and _has_content(line[6:]):
                first = time.perf_counter()
    if first is None:
        raise RuntimeError(f"{url}: a stream without content")
    return first - started


def _has_content(event: bytes) -> bool:
    choices = json.loads(event).get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


async def added(paths: dict[str, tuple[str, dict[str, str]]], pairs: int) -> dict[str, Any]:
    """One request at a time, entry and direct alternating (which goes first, too)."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    async with aiohttp.ClientSession() as session:
        for i in range(pairs):
            for name in sorted(paths, reverse=bool(i % 2)):
                times[name].append(await ttft(session, *paths[name]))
    return {name: summary(found) for name, found in times.items()} | {"samples": times}


async def closed_loop(
    url: str, headers: dict[str, str], *, clients: int, seconds: float
) -> tuple[list[float], float]:
    """`clients` loops sending one request after another for `seconds`: TTFTs and wall time."""
    times: list[float] = []
    stop = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)

    async def one_client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < stop:
            times.append(await ttft(session, url, headers))

    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one_client(session) for _ in range(clients)))
    return times, time.monotonic() - started


async def load(
    paths: dict[str, tuple[str, dict[str, str]]], entry_pid: int, seconds: float
) -> list[dict[str, Any]]:
    levels = []
    for clients in LEVELS:
        level: dict[str, Any] = {"clients": clients}
        for name in ("entry", "direct"):
            before = cpu_seconds(entry_pid)
            times, wall = await closed_loop(*paths[name], clients=clients, seconds=seconds)
            level[name] = summary(times) | {"requests_per_s": len(times) / wall}
            if name == "entry":
                used = cpu_seconds(entry_pid) - before
                level["entry_cpu_s"] = used
                level["entry_requests_per_cpu_s"] = len(times) / used if used else None
        level["added_p99_ms"] = level["entry"]["p99_ms"] - level["direct"]["p99_ms"]
        levels.append(level)
        print(
            f"{clients:3d} clients: entry {level['entry']['requests_per_s']:6.0f} req/s, "
            f"added p99 {level['added_p99_ms']:6.2f} ms, "
            f"{level['entry_requests_per_cpu_s'] or 0:6.0f} req per entry CPU-second"
        )
    return levels


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "n": len(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


# -- the report --------------------------------------------------------------------------------


def verdict(first: dict[str, Any], levels: list[dict[str, Any]]) -> dict[str, Any]:
    added_p50 = first["entry"]["p50_ms"] - first["direct"]["p50_ms"]
    within = [lv for lv in levels if lv["added_p99_ms"] <= P99_LIMIT_MS]
    per_core = [lv["entry_requests_per_cpu_s"] for lv in within if lv["entry_requests_per_cpu_s"]]
    return {
        "added_p50_ms": added_p50,
        "added_p99_ms": first["entry"]["p99_ms"] - first["direct"]["p99_ms"],
        "tokenizer_count_p50_ms": first["entry"]["p50_ms"] - first[UNCOUNTED]["p50_ms"],
        "goal_added_p50_ms": GOAL_ADDED_P50_MS,
        "max_clients_within_p99_limit": max((lv["clients"] for lv in within), default=0),
        "requests_per_core_within_p99_limit": max(per_core, default=0.0),
        "goal_requests_per_core": GOAL_RPS_PER_CORE,
    }


def plot(first: dict[str, Any], levels: list[dict[str, Any]], path: Path) -> None:
    fig, (cdf, per_level) = plt.subplots(1, 2, figsize=(11, 4))
    for name, samples in first["samples"].items():
        ordered = sorted(1000 * t for t in samples)
        cdf.plot(ordered, [i / len(ordered) for i in range(len(ordered))], label=name)
    cdf.set(xlabel="TTFT (ms), one request at a time", ylabel="fraction", title="entry vs direct")
    cdf.legend()
    clients = [lv["clients"] for lv in levels]
    per_level.plot(clients, [lv["added_p99_ms"] for lv in levels], "o-", label="added p99 (ms)")
    per_level.plot(clients, [lv["entry"]["p50_ms"] - lv["direct"]["p50_ms"] for lv in levels],
                   "s-", label="added p50 (ms)")  # fmt: skip
    per_level.axhline(P99_LIMIT_MS, color="grey", linestyle="--", label="p99 limit")
    per_level.set(xscale="log", xlabel="concurrent clients", ylabel="ms", title="under load")
    per_level.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the entry's event loop (uvloop: run with `uv run --with uvloop`)",
    )
    parser.add_argument("--serve-entry", nargs=2, metavar=("PORT", "ROUTER"))
    parser.add_argument("--uncounted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_entry:
        serve_entry(int(args.serve_entry[0]), args.serve_entry[1], loop=args.loop,
                    counted=not args.uncounted)  # fmt: skip
        return
    replica, router, entry, uncounted = free_port(), free_port(), free_port(), free_port()
    logs = args.out / "entry_overhead-logs"
    logs.mkdir(parents=True, exist_ok=True)
    children = [
        spawn([sys.executable, "-m", "radixfleet.emulator", "--port", str(replica), "--warm",
               "--time-scale", "0.001", "--model", MODEL], core=1, log=logs / "replica.log"),
        spawn([sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port",
               str(router), "--worker-urls", f"http://127.0.0.1:{replica}",
               "--policy", "cache_aware", "--prometheus-port", str(free_port()),
               "--tokenizer-path", str(ensure_tokenizer_dir()),
               "--log-level", "warn"], core=1, log=logs / "smg.log"),
        spawn([sys.executable, __file__, "--loop", args.loop, "--serve-entry", str(entry),
               f"http://127.0.0.1:{router}"], core=0, log=logs / "entry.log"),
        spawn([sys.executable, __file__, "--loop", args.loop, "--serve-entry", str(uncounted),
               f"http://127.0.0.1:{router}", "--uncounted"], core=0,
              log=logs / "entry-uncounted.log"),
    ]  # fmt: skip
    os.sched_setaffinity(0, {1})
    try:
        direct: tuple[str, dict[str, str]] = (f"http://127.0.0.1:{router}", {})
        auth = {"Authorization": f"Bearer {KEY}"}
        through = (f"http://127.0.0.1:{entry}", auth)
        byte_bound = (f"http://127.0.0.1:{uncounted}", auth)
        for path in (direct, through, byte_bound):
            wait_until_serving(*path)
        paths = {"entry": through, "direct": direct}
        first = asyncio.run(added(paths | {UNCOUNTED: byte_bound}, args.pairs))
        levels = asyncio.run(load(paths, children[2].pid, args.seconds))
    finally:
        for child in children:
            child.terminate()
            child.wait(timeout=15)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {"pairs": args.pairs, "seconds": args.seconds, "levels": LEVELS, "body": BODY,
                "replica_time_scale": 0.001, "entry_loop": args.loop}  # fmt: skip
    added_summary = {k: v for k, v in first.items() if k != "samples"}
    result = {
        "benchmark": "entry_overhead",
        "machine": describe_machine(),
        "settings": settings,
        "verdict": verdict(first, levels),
        "added": added_summary,
        "load": levels,
    }
    shutil.rmtree(logs)  # kept only when a run fails
    name = "entry_overhead" + ("" if args.loop == "asyncio" else f"-{args.loop}")
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(first, levels, args.out / f"{name}.png")
    print(json.dumps(result["verdict"], indent=2))


if __name__ == "__main__":
    main()
