"""Under load: a tenant bursting at ten times its token budget is throttled, and the other
tenants' TTFT stays within their SLO with none of their requests failing.

One emulated replica slowed ten times (with a batch of eight, so that the noisy tenant alone
would saturate it: unenforced, the others' TTFT p95 rises past 4 s in the same run, see
`python -m tests.quota.load`) behind the local fleet's region entry with the gate installed.
The SLO is 1 s of TTFT in that slowed time.
"""

from __future__ import annotations

import pytest

from radixfleet.controllers.quota.ledger import DEFAULT_BURST_SECONDS
from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from tests.quota.load import Settings, noisy_run, summary, tenants_at

pytestmark = pytest.mark.slow

SLO_TTFT_S = 1.0
BUDGET = 6000  # tokens per minute, each tenant


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> EmulatorTokenizer:
    return load_tokenizer(tmp_path_factory.getbasetemp() / "tokenizer-cache")


def test_a_noisy_tenant_is_throttled_and_the_others_keep_their_slo(
    tokenizer: EmulatorTokenizer,
) -> None:
    settings = Settings(seconds=8.0)
    tenants = tenants_at(BUDGET, settings, noisy_factor=10, good_share=0.7)
    run, gate = noisy_run(tenants, settings, tokenizer, enforce=True)
    report = summary(run, tenants, SLO_TTFT_S)
    for good in ("a", "b"):
        assert run.failed(good) == [], report
        assert report[good]["unanswered"] == 0, report
        assert report[good]["ttft_p95_s"] <= SLO_TTFT_S, report
    noisy = report["noisy"]
    assert noisy["throttled"] >= noisy["requests"] / 2, report
    metrics = gate.metrics
    assert metrics is not None
    throttled = metrics.throttled.labels("local", "noisy")._value.get()
    assert throttled == noisy["throttled"]
    # What the noisy tenant got through: its burst, its refill, and the streams in flight.
    charged = sum(
        metrics.tokens.labels("local", "noisy", "llama", kind)._value.get()
        for kind in ("prompt", "completion")
    )
    allowance = BUDGET / 60 * (DEFAULT_BURST_SECONDS + settings.seconds + settings.grace)
    assert charged <= 1.2 * allowance, (charged, allowance)
