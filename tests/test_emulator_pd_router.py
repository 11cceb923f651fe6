"""The real smg 1.13.0 in PD mode (`--pd-disaggregation`) in front of an emulated prefill and
decode replica: it sends each request to both with a bootstrap room, and the client gets the
decode's answer, which came after the prefill's room."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from radixfleet.emulator.bootstrap import DisaggConfig
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.testing import RunningEmulator, serve_in_thread
from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.profile import ReplicaProfile
from tests.smg import MODEL, get_json, running_smg

pytestmark = pytest.mark.fleet
PROFILE = ReplicaProfile().scaled(time_factor=0.05)


@dataclass(frozen=True)
class PdFleet:
    url: str
    prefill: RunningEmulator
    decode: RunningEmulator


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PdFleet]:
    tokenizer = load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")
    roles = [DisaggConfig("prefill", 0), DisaggConfig("decode", room_timeout_s=10.0)]
    configs = [EmulatorConfig(profile=PROFILE, port=0, warm=True, disaggregation=r) for r in roles]
    with (
        serve_in_thread(configs[0], tokenizer=tokenizer) as prefill,
        serve_in_thread(configs[1], tokenizer=tokenizer) as decode,
    ):
        assert prefill.emulator.role is not None and prefill.emulator.role.bootstrap is not None
        bootstrap = prefill.emulator.role.bootstrap.port
        pd = ["--pd-disaggregation", "--prefill", prefill.url, str(bootstrap),
              "--decode", decode.url]  # fmt: skip
        with running_smg(
            [], log=tmp_path_factory.mktemp("router") / "router.log", policy="round_robin",
            extra=pd, workers=2,
        ) as gateway:  # fmt: skip
            yield PdFleet(gateway.url, prefill, decode)


def test_smg_registers_each_role(fleet: PdFleet) -> None:
    workers = {w["url"]: w for w in get_json(f"{fleet.url}/workers")["workers"]}
    assert workers[fleet.prefill.url]["worker_type"] == "prefill"
    assert workers[fleet.decode.url]["worker_type"] == "decode"


def test_a_chat_request_is_answered_by_decode_after_prefill(fleet: PdFleet) -> None:
    client = openai.OpenAI(base_url=f"{fleet.url}/v1", api_key="none", max_retries=0)
    prefilled = fleet.prefill.emulator.model.stats(fleet.prefill.emulator.driver.now())
    decoded = fleet.decode.emulator.model.stats(fleet.decode.emulator.driver.now())
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a story. " * 50}],
        max_tokens=12, extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert answer.usage is not None and answer.usage.completion_tokens == 12
    after_p = fleet.prefill.emulator.model.stats(fleet.prefill.emulator.driver.now())
    after_d = fleet.decode.emulator.model.stats(fleet.decode.emulator.driver.now())
    # The prefill ran the prompt and one token; the decode generated the answer.
    assert (
        after_p.counters.generation_tokens_total - prefilled.counters.generation_tokens_total == 1
    )
    assert after_d.counters.generation_tokens_total - decoded.counters.generation_tokens_total == 12


def test_a_streamed_request_comes_whole(fleet: PdFleet) -> None:
    client = openai.OpenAI(base_url=f"{fleet.url}/v1", api_key="none", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=6, stream=True, extra_body={"ignore_eos": True},
    )  # fmt: skip
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
