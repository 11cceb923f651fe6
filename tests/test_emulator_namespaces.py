"""Cache namespaces in the emulated replica: LoRA adapters and cache salts, as SGLang keeps them.

A prefix cached under one adapter or salt is never a hit for another (or for the base model);
the same adapter and salt hit as usual. The KV events of a namespaced page name its adapter and
salt, and its hash chain starts from the namespace's seed (sglang's for a salt), so equal tokens
in two namespaces never share a hash and a router can never merge them. Adapters a request names
must be loaded (`--lora-paths`); bad values get 400 with SGLang's error body.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sched

from radixfleet.emulator import protocol
from radixfleet.emulator.grpc_server import _generate_body
from radixfleet.emulator.kv_events import KvEventLog, as_int64
from radixfleet.emulator.launch_server import LaunchError, lora_name
from radixfleet.emulator.testing import RunningEmulator
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaModel
from tests.test_emulator_http import MODEL, post_json, serve

PROMPT = "You are a careful assistant for the billing team. " * 12  # several cache pages


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


@pytest.fixture(scope="module")
def replica(tokenizer: EmulatorTokenizer) -> Iterator[RunningEmulator]:
    with serve(tokenizer, lora_adapters=("billing", "support")) as running:
        yield running


def cached(replica: RunningEmulator, prompt: str, **fields: Any) -> int:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, **fields}
    status, answer = post_json(f"{replica.url}/v1/completions", body)
    assert status == 200, answer
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


@pytest.mark.parametrize(
    ("first", "second", "shares"),
    [
        ({"lora_path": "billing"}, {"lora_path": "billing"}, True),
        ({"lora_path": "billing"}, {"model": f"{MODEL}:billing"}, True),
        ({"lora_path": "billing"}, {"lora_path": "support"}, False),
        ({"lora_path": "billing"}, {}, False),
        ({}, {"lora_path": "billing"}, False),
        ({"cache_salt": "tenant-a"}, {"cache_salt": "tenant-a"}, True),
        ({"cache_salt": "tenant-a"}, {"cache_salt": "tenant-b"}, False),
        ({"cache_salt": "tenant-a"}, {"cache_salt": "tenant-a", "lora_path": "billing"}, False),
    ],
    ids=["same-adapter", "adapter-by-model-name", "other-adapter", "adapter-then-base",
         "base-then-adapter", "same-salt", "other-salt", "salt-then-salt-and-adapter"],
)  # fmt: skip
def test_a_prefix_is_reused_only_in_its_own_namespace(
    replica: RunningEmulator, first: dict[str, str], second: dict[str, str], shares: bool,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    prompt = f"[{request.node.callspec.id}] {PROMPT}"  # a prefix of this case's own
    assert cached(replica, prompt, **first) == 0
    assert (cached(replica, prompt, **second) > 0) is shares


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"lora_path": "marketing"},
            "Got LoRA adapter that has never been loaded: marketing\n"
            "All loaded adapters: dict_keys(['billing', 'support']).",
        ),
        ({"lora_path": 7}, "Field 'lora_path' must be a string, got int."),
        ({"cache_salt": ["a"]}, "Field 'cache_salt' must be a string, got list."),
        ({"cache_salt": "x" * 257}, "Field 'cache_salt' is longer than 256 characters."),
    ],
    ids=["unknown-adapter", "adapter-not-a-string", "salt-not-a-string", "salt-too-long"],
)
def test_bad_namespaces_get_400_with_sglangs_body(
    replica: RunningEmulator, fields: dict[str, Any], message: str
) -> None:
    status, answer = post_json(
        f"{replica.url}/v1/completions", {"model": MODEL, "prompt": "hi", **fields}
    )
    assert status == 400
    assert answer["error"]["message"] == message


def test_a_replica_without_adapters_refuses_a_lora_request(tokenizer: EmulatorTokenizer) -> None:
    with serve(tokenizer) as plain:
        status, answer = post_json(f"{plain.url}/generate", {"text": "hi", "lora_path": "x"})
    assert status == 400
    assert "LoRA is not enabled" in answer["error"]["message"]


# -- KV events ---------------------------------------------------------------------------------

BLOCK = 4
TOKENS = tuple(range(1, 9))  # two pages


def stored_events(namespace: protocol.CacheNamespace | None) -> list[Any]:
    profile = ReplicaProfile().model_copy(update={"kv_capacity_tokens": 64})
    model = ReplicaModel(profile=profile, now=0.0, block_tokens=BLOCK, warm=True)
    log = KvEventLog(model)
    model.cache.insert(protocol.block_keys(list(TOKENS), BLOCK, namespace), now=1.0)
    log.flush()
    return [e.stored for b in log.history for e in b.events if e.WhichOneof("data") == "stored"]


def salted_chain(salt: str) -> list[int]:
    """sglang's salted event hashes, written out from its definition: the chain seeded with
    SHA-256 of "sglang-cache-salt-v1", a zero byte and the salt."""
    prior, out = hashlib.sha256(b"sglang-cache-salt-v1\0" + salt.encode()).digest(), []
    for start in range(0, len(TOKENS), BLOCK):
        page = b"".join(t.to_bytes(4, "little") for t in TOKENS[start : start + BLOCK])
        prior = hashlib.sha256(prior + page).digest()
        out.append(as_int64(prior))
    return out


def test_salted_pages_carry_the_salt_and_sglangs_salted_hashes() -> None:
    stored = stored_events(protocol.CacheNamespace(salt="tenant-a"))
    assert [s.blocks[0].block_hash for s in stored] == salted_chain("tenant-a")
    assert [s.cache_salt for s in stored] == ["tenant-a", "tenant-a"]
    assert not stored[0].HasField("parent_block_hash")  # the seed is no page
    assert stored[1].parent_block_hash == stored[0].blocks[0].block_hash
    assert all(not s.HasField("lora_name") for s in stored)


@pytest.mark.parametrize(
    "namespace",
    [protocol.CacheNamespace(lora="billing"), protocol.CacheNamespace(lora="support"),
     protocol.CacheNamespace(salt="a"), protocol.CacheNamespace(lora="billing", salt="a")],
    ids=["billing", "support", "salt-a", "billing-salt-a"],
)  # fmt: skip
def test_equal_tokens_in_another_namespace_never_share_a_hash(
    namespace: protocol.CacheNamespace,
) -> None:
    base = {s.blocks[0].block_hash for s in stored_events(None)}
    mine = stored_events(namespace)
    assert base.isdisjoint(s.blocks[0].block_hash for s in mine)
    assert [list(s.blocks[0].token_ids) for s in mine] == [list(TOKENS[:4]), list(TOKENS[4:])]
    assert {s.lora_name or None for s in mine} == {namespace.lora}


# -- how adapters are named ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name"),
    [("billing=/mnt/adapters/billing", "billing"), ("/mnt/adapters/x", "/mnt/adapters/x"),
     ('{"lora_name": "support", "lora_path": "/a", "pinned": true}', "support")],
    ids=["name=path", "bare-path", "json"],
)  # fmt: skip
def test_lora_paths_entries_name_their_adapter(spec: str, name: str) -> None:
    assert lora_name(spec) == name


def test_a_json_lora_paths_entry_without_a_name_is_refused() -> None:
    with pytest.raises(LaunchError, match="lora_name"):
        lora_name('{"lora_path": "/a"}')


def test_a_grpc_request_names_its_adapter_by_lora_id() -> None:
    request = sched.GenerateRequest(request_id="r", lora_id="billing")
    request.tokenized.input_ids.extend([1, 2, 3])
    assert _generate_body(request)["lora_path"] == "billing"
    assert "lora_path" not in _generate_body(sched.GenerateRequest(request_id="r"))
