"""The twin's canary window, as the canary benchmark's baselines read it: the canary's p99 TTFT
and request duration (arrival to last token), the numbers Flagger's builtin checks judge."""

from __future__ import annotations

import pytest

from radixfleet.replica import RequestSpec
from radixfleet.twin.metrics import CanaryWindow, quantile

SPEC = RequestSpec(rid="r", prompt_tokens=100, output_tokens=11, max_new_tokens=11)


def test_the_canary_p99s_cover_only_the_window() -> None:
    window = CanaryWindow(10.0)
    window.add(1, 0.5, 9.0, 0.5, 0, SPEC)  # ends before the window: left out
    ttfts = [0.1 + i / 1000 for i in range(100)]
    for i, ttft in enumerate(ttfts):
        window.add(1, 5.0 + i / 100, ttft, 0.01, 0, SPEC)
    window.add(0, 6.0, 5.0, 0.5, 0, SPEC)  # the stable revision's: not the canary's
    ttft, duration = window.canary_p99(12.0)
    assert ttft == pytest.approx(quantile(ttfts, 0.99))
    assert duration == pytest.approx(ttft + 10 * 0.01)  # ten gaps after the first token


def test_no_finished_canary_request_is_no_value() -> None:
    assert CanaryWindow(60.0).canary_p99(0.0) == (None, None)
