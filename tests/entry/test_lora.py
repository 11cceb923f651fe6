"""A LoRA model's adapters through the cluster's entry, against the real smg 1.13 in front of an
emulated SGLang replica that preloads two adapters (`--lora-paths`), as a revision's router and
pod are in a cluster; and the adapters the entry reads from an InferenceService, on their own.

What runs for real: smg (it knows models only by its workers' registered names and passes
`lora_path` on), the emulated replica (SGLang's LoRA: a request for an adapter it does not hold
is its 400; an adapter's prompts are cached apart from the base's), the entry and the quota's
gate. Which adapter served a request shows in the replica's prompt cache: a prompt sent under an
adapter is a cache hit for that adapter again, in either spelling, and a miss for the base.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from radixfleet import dataplane
from radixfleet.controllers.quota.entry import ClusterGate
from radixfleet.controllers.quota.fakes import FakeSecrets, FakeTenants
from radixfleet.dataplane.routes import Target, adapters_of, build_routes
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import EmulatorTokenizer
from radixfleet.entry.server import ClusterEntry, Upstreams
from radixfleet.profile import ReplicaProfile
from radixfleet.sglang_flags import lora_path_specs
from tests.smg import Gateway, running_smg

BASE = "llama-lora"
ADAPTERS = {"blue": ("blue-tone", "shared-sql"), "green": ("green-tone", "shared-sql")}
KEY = "data-plane-key-of-the-test"


# -- what the entry reads from an InferenceService (no network) ----------------------------------


def _isvc(namespace: str, args: list[str]) -> dict[str, Any]:
    traffic = [{"revisionName": f"{BASE}-predictor-00001", "percent": 100}]
    return {
        "metadata": {"name": BASE, "namespace": namespace},
        "spec": {"predictor": {"model": {"runtime": "sglang-lora", "args": args}}},
        "status": {"components": {"predictor": {"traffic": traffic}}},
    }


def _lora_args(adapters: tuple[str, ...]) -> list[str]:
    paths = [f"{name}=/mnt/adapters/{name}" for name in adapters]
    return ["--context-length", "8192", "--lora-paths", *paths, "--max-loras-per-batch", "4"]


@pytest.mark.parametrize(
    ("args", "adapters"),
    [
        (_lora_args(("a", "b")), ("a", "b")),
        (["--lora-paths=a=/mnt/a", "--lora-paths", "b"], ("a", "b")),
        (["--lora-paths", '{"lora_name": "a", "lora_path": "/mnt/a", "pinned": true}'], ("a",)),
        (["--lora-paths", '{"lora_path": "/mnt/a"}', "b=/mnt/b"], ("b",)),
        (["--lora-paths", "a=/mnt/a", "a=/mnt/other"], ("a",)),
        (["--some-future-flag", "x", "--lora-paths", "a=/mnt/a", "--enable-lora"], ("a",)),
        (["--context-length", "8192"], ()),
        ([], ()),
    ],
    ids=[
        "name=path",
        "inline-and-bare",
        "json",
        "unreadable-json-left-out",
        "twice-once",
        "unknown-flags",
        "no-lora-paths",
        "no-args",
    ],
)
def test_an_inference_services_adapters_are_its_lora_paths(
    args: list[str], adapters: tuple[str, ...]
) -> None:
    assert adapters_of(_isvc("team-blue", args)) == adapters


def test_a_predictor_without_a_model_has_no_adapters() -> None:
    assert adapters_of({"metadata": {"name": BASE}, "spec": {"predictor": {}}}) == ()


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), max_size=6))
def test_every_lora_paths_entry_is_read_whatever_surrounds_it(names: list[str]) -> None:
    specs = [f"{name}=/mnt/adapters/{name}" for name in names]
    args = ["--tp-size", "2", "--lora-paths", *specs, "--max-loras-per-batch", "-1"]
    assert lora_path_specs(args) == specs


# -- through the entry, the real smg and an emulated replica ------------------------------------


@pytest.fixture(scope="module")
def router(tokenizer: EmulatorTokenizer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    tuple[Gateway, RunningEmulator]
]:  # fmt: skip
    """smg in front of one replica of the base holding blue's adapters."""
    config = EmulatorConfig(profile=ReplicaProfile().scaled(time_factor=0.01), port=0, warm=True,
                            served_model_name=BASE, lora_adapters=ADAPTERS["blue"])  # fmt: skip
    with serve_in_thread(config, tokenizer=tokenizer) as replica:
        log: Path = tmp_path_factory.mktemp("smg") / "smg.log"
        with running_smg([replica.url], log=log) as gateway:
            yield gateway, replica


class OneRouter(Upstreams):
    """Every revision's router is the test's smg."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def router(self, target: Target) -> str:
        return self.url


def _gate() -> ClusterGate:
    tenants, secrets = FakeTenants(), FakeSecrets()
    for name in ADAPTERS:
        tenants.add({"metadata": {"name": name}, "spec": {
            "namespaces": [f"team-{name}"], "tokenBudget": {"tokensPerMinute": 6_000_000},
            "apiKeys": [{"name": "keys", "namespace": f"team-{name}"}]}})  # fmt: skip
        secrets.keys[(f"team-{name}", "keys", "api-key")] = f"sk-{name}"
    return ClusterGate(tenants, secrets, replicas=1, region="test")


@asynccontextmanager
async def _entry(gateway: Gateway) -> AsyncIterator[str]:
    async with aiohttp.ClientSession() as session:
        gate = _gate()
        entry = ClusterEntry(gate=gate, session=session, upstreams=OneRouter(gateway.url))
        entry.keys = {f"team-{tenant}": {dataplane.KEY: KEY} for tenant in ADAPTERS}
        isvcs = [_isvc(f"team-{t}", _lora_args(adapters)) for t, adapters in ADAPTERS.items()]
        entry.routes = build_routes(gate.sync(), isvcs)
        async with TestServer(entry.app()) as server:
            yield str(server.make_url("")).rstrip("/")


async def _call(
    url: str, path: str, body: dict[str, Any] | None = None, *, tenant: str = "blue"
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer sk-{tenant}"}
    async with aiohttp.ClientSession() as session:
        if body is None:
            async with session.get(url + path, headers=headers) as answer:
                return answer.status, await answer.json()
        async with session.post(url + path, json=body, headers=headers) as answer:
            return answer.status, json.loads(await answer.text())


def _through_entry(gateway: Gateway, *calls: tuple[str, dict[str, Any] | None]) -> list[Any]:
    async def go() -> list[Any]:
        async with _entry(gateway) as url:
            return [await _call(url, path, body) for path, body in calls]

    return asyncio.run(go())


def _completion(prompt: str, **fields: Any) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": 1, **fields}


def _cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


@pytest.mark.fleet
def test_a_tenant_lists_its_bases_adapters_as_models(
    router: tuple[Gateway, RunningEmulator],
) -> None:
    [(status, listed)] = _through_entry(router[0], ("/v1/models", None))
    assert status == 200, listed
    models = {model["id"]: model.get("parent") for model in listed["data"]}
    assert models == {BASE: None, f"{BASE}:blue-tone": BASE, f"{BASE}:shared-sql": BASE}


@pytest.mark.fleet
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"model": f"{BASE}:blue-tone"}, {"model": BASE, "lora_path": "blue-tone"}),
        ({"model": BASE, "lora_path": "shared-sql"}, {"model": f"{BASE}:shared-sql"}),
    ],
    ids=["named-then-lora-path", "lora-path-then-named"],
)
def test_both_spellings_of_an_adapter_are_served_by_that_adapter(
    router: tuple[Gateway, RunningEmulator], first: dict[str, Any], second: dict[str, Any]
) -> None:
    """The second request hits the cache the first filled under the same adapter, and the
    base's request with the same prompt does not: the adapter served both."""
    # Its opening its own: the replica is the module's, and a prefix cached by an earlier
    # test's base request would be a hit here.
    prompt = f"{sorted(first.items())} is the opening; tell its story at length. " * 8
    answers = _through_entry(
        router[0],
        ("/v1/completions", _completion(prompt, **first)),
        ("/v1/completions", _completion(prompt, **second)),
        ("/v1/completions", _completion(prompt, model=BASE)),
    )
    assert [status for status, _ in answers] == [200, 200, 200], answers
    assert _cached(answers[1][1]) > 0, "the second spelling missed the adapter's cache"
    assert _cached(answers[2][1]) == 0, "the base shared the adapter's cache"


@pytest.mark.fleet
def test_sglangs_native_generate_takes_an_adapter_by_lora_path(
    router: tuple[Gateway, RunningEmulator],
) -> None:
    """`/generate` names no model: a tenant's only base is meant, its adapters no other."""
    body = {"text": "Hello there.", "lora_path": "blue-tone",
            "sampling_params": {"max_new_tokens": 2}}  # fmt: skip
    [(status, answer)] = _through_entry(router[0], ("/generate", body))
    assert status == 200, answer
    assert answer["text"] is not None


@pytest.mark.fleet
@pytest.mark.parametrize(
    "body",
    [
        {"model": f"{BASE}:green-tone"},
        {"model": BASE, "lora_path": "green-tone"},
        {"model": f"{BASE}:no-such-adapter"},
    ],
    ids=["another-tenants-named", "another-tenants-lora-path", "nobodys"],
)
def test_an_adapter_the_tenant_does_not_see_is_404(
    router: tuple[Gateway, RunningEmulator], body: dict[str, Any]
) -> None:
    [(status, answer)] = _through_entry(router[0], ("/v1/completions", _completion("Hi", **body)))
    assert status == 404, answer
    assert answer["error"]["code"] == "model_not_found"
