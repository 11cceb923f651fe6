"""The Prometheus adapter and the canary's PromQL against a real Prometheus holding real series.

Three revisions of one InferenceService are backfilled as SGLang would export them, with the
`revision` and `namespace` labels the scrape relabeling adds: a canary (slower, 5% errors), a
stable one, and an idle one whose counters never move (zero traffic: NaN quantiles and ratios).
A fourth revision has no series at all.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from radixfleet.adapters.prometheus import (
    NO_RETRY,
    AmbiguousResult,
    BadQuery,
    HttpPrometheus,
    MetricsUnavailable,
    NoData,
    NotFinite,
    RetryPolicy,
)
from radixfleet.controllers.canary.observe import measure
from radixfleet.controllers.canary.queries import REQUESTS, QueryConfig, revision_queries
from radixfleet.controllers.canary.spec import CanaryPolicySpec, Metric, MetricCheck
from radixfleet.controllers.canary.state import Observed
from tests.adapters.prometheus_server import Family, available, running_prometheus

pytestmark = pytest.mark.prometheus

NS = "team-a"
CANARY, STABLE, IDLE, ABSENT = "llama-00002", "llama-00001", "llama-00003", "llama-00009"
BASELINE = "baseline"  # a key of REVISIONS: the stable revision's baseline replicas
STEP_S = 15
END = datetime.fromtimestamp(1_780_000_000 - 1_780_000_000 % 3600, tz=UTC)  # a whole hour
POINTS = 21  # five minutes of samples every 15 s, ending at END
TTFT_LE = (0.1, 0.2, 0.4, 0.8, 2.0)

# Per 15 s step: cumulative TTFT bucket counts, responses by status, cached and prompt tokens.
REVISIONS: dict[str, dict[str, Any]] = {
    CANARY: {"ttft": (50, 90, 100, 100, 100), "ok": 95, "err": 5, "cached": 30, "prompt": 100},
    STABLE: {"ttft": (80, 100, 100, 100, 100), "ok": 100, "err": 0, "cached": 50, "prompt": 100},
    IDLE: {"ttft": (0, 0, 0, 0, 0), "ok": 0, "err": 0, "cached": 0, "prompt": 0},
    # The stable revision's replicas in a canary's baseline: its name, another pool.
    BASELINE: {
        "ttft": (60, 100, 100, 100, 100),
        "ok": 45,
        "err": 5,
        "cached": 20,
        "prompt": 100,
        "revision": STABLE,
        "pool": "baseline",
    },
}


def _series(name: str, labels: str, per_step: float, *, base: float = 0) -> list[str]:
    start = END.timestamp() - (POINTS - 1) * STEP_S
    return [
        f"{name}{{{labels}}} {base + per_step * i} {start + i * STEP_S:.0f}" for i in range(POINTS)
    ]


def _families() -> list[Family]:
    ttft, responses, cached, prompt = [], [], [], []
    for key, r in REVISIONS.items():
        revision = r.get("revision", key)
        pool = f',pool="{r["pool"]}"' if "pool" in r else ""  # the stable's have no pool label
        sel = f'namespace="{NS}",revision="{revision}",model_name="llama"{pool}'
        # An idle revision served once before the data starts: its series exist but stand still.
        base = 7.0 if revision == IDLE else 0.0
        for le, count in [*zip(TTFT_LE, r["ttft"], strict=True), ("+Inf", 100 * (base == 0))]:
            name = "sglang:time_to_first_token_seconds_bucket"
            ttft += _series(name, f'{sel},le="{le}"', count, base=base)
        ttft += _series("sglang:time_to_first_token_seconds_count", sel, r["ok"], base=base)
        ttft += _series("sglang:time_to_first_token_seconds_sum", sel, 15, base=base)
        gen = f'{sel},endpoint="/generate",method="POST"'
        responses += _series("sglang:http_responses_total", f'{gen},status_code="200"', r["ok"],
                             base=base)  # fmt: skip
        if r["err"]:
            responses += _series(
                "sglang:http_responses_total", f'{gen},status_code="500"', r["err"]
            )
        # Health probes answer 200 far more often than users call; they must not count.
        health = f'{sel},endpoint="/health",method="GET",status_code="200"'
        responses += _series("sglang:http_responses_total", health, 1000)
        cached += _series("sglang:cached_tokens_total", f'{sel},source="device"', r["cached"])
        prompt += _series("sglang:prompt_tokens_total", sel, r["prompt"], base=base)
    return [
        Family("sglang:time_to_first_token_seconds", "histogram", ttft),
        Family("sglang:http_responses", "counter", responses),
        Family("sglang:cached_tokens", "counter", cached),
        Family("sglang:prompt_tokens", "counter", prompt),
    ]


@pytest.fixture(scope="module")
def prometheus_url() -> Iterator[str]:
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    with running_prometheus(_families()) as url:
        yield url


@pytest.fixture
def prom(prometheus_url: str) -> HttpPrometheus:
    return HttpPrometheus(prometheus_url, retry=NO_RETRY)


def _query(revision: str, key: str) -> str:
    baseline = revision == BASELINE
    queries = revision_queries(
        namespace=NS, revision=STABLE if baseline else revision, window_seconds=60,
        config=QueryConfig(), baseline=baseline,
    )  # fmt: skip
    return queries[key]


# p95 of the canary: rank 95 of 100 falls in (0.2, 0.4] holding 10 -> 0.2 + 0.2 * 5/10.
EXPECTED = [
    (CANARY, REQUESTS, 400.0),
    (CANARY, Metric.TTFT_P95, 0.3),
    (CANARY, Metric.ERROR_RATE, 0.05),
    (CANARY, Metric.CACHE_HIT_RATE, 0.3),
    (STABLE, REQUESTS, 400.0),
    (STABLE, Metric.TTFT_P95, 0.175),
    (STABLE, Metric.ERROR_RATE, 0.0),  # no 5xx series at all is no errors, not missing data
    (STABLE, Metric.CACHE_HIT_RATE, 0.5),
    # The baseline's p95: rank 95 of 100 in (0.1, 0.2] holding 40 -> 0.1 + 0.1 * 35/40; the
    # stable revision's numbers above leave its baseline's replicas out.
    (BASELINE, REQUESTS, 200.0),
    (BASELINE, Metric.TTFT_P95, 0.1875),
    (BASELINE, Metric.ERROR_RATE, 0.1),
    (BASELINE, Metric.CACHE_HIT_RATE, 0.2),
    (IDLE, REQUESTS, 0.0),
    (IDLE, Metric.CACHE_HIT_RATE, math.nan),  # 0 / 0 over no traffic
]


@pytest.mark.parametrize(
    ("revision", "key", "expected"), EXPECTED, ids=[f"{r}-{k}" for r, k, _ in EXPECTED]
)
def test_canary_queries_on_real_series(
    prom: HttpPrometheus, revision: str, key: str, expected: float
) -> None:
    if math.isnan(expected):
        with pytest.raises(NotFinite):
            prom.scalar(_query(revision, key), at=END)
        return
    assert prom.scalar(_query(revision, key), at=END) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("key", [Metric.TTFT_P95, Metric.ERROR_RATE], ids=str)
def test_zero_traffic_is_not_a_number_and_halts(prom: HttpPrometheus, key: str) -> None:
    with pytest.raises(NotFinite) as caught:
        prom.scalar(_query(IDLE, key), at=END)
    assert math.isnan(caught.value.value)
    assert isinstance(caught.value, NoData)  # callers that halt on NoData halt on NaN too


@pytest.mark.parametrize("key", [REQUESTS, Metric.TTFT_P95, Metric.ERROR_RATE], ids=str)
def test_a_revision_without_series_has_no_data(prom: HttpPrometheus, key: str) -> None:
    with pytest.raises(NoData) as caught:
        prom.scalar(_query(ABSENT, key), at=END)
    assert not isinstance(caught.value, NotFinite)


def test_vector_keeps_labels_and_nan(prom: HttpPrometheus) -> None:
    promql = 'sum by (revision) (rate(sglang:prompt_tokens_total{namespace="team-a"}[1m]))'
    samples = {s.labels["revision"]: s.value for s in prom.vector(promql, at=END)}
    assert samples == pytest.approx({CANARY: 100 / 15, STABLE: 200 / 15, IDLE: 0.0})
    assert prom.vector('sglang:prompt_tokens_total{revision="none"}', at=END) == []


def test_a_scalar_over_several_series_is_ambiguous(prom: HttpPrometheus) -> None:
    with pytest.raises(AmbiguousResult):
        prom.scalar("sglang:prompt_tokens_total", at=END)


def test_a_syntax_error_is_a_bad_query_with_status(prom: HttpPrometheus) -> None:
    with pytest.raises(BadQuery) as caught:
        prom.scalar("sum(rate(", at=END)
    assert caught.value.status == 400
    assert caught.value.error_type == "bad_data"
    assert not caught.value.temporary


def test_online_and_offline(prom: HttpPrometheus) -> None:
    assert prom.is_online()
    dead = HttpPrometheus("http://127.0.0.1:9", retry=NO_RETRY, timeout_seconds=1)
    assert not dead.is_online()
    with pytest.raises(MetricsUnavailable) as caught:
        dead.scalar("up")
    assert caught.value.status is None and caught.value.temporary


def test_the_canary_window_measured_on_real_series(prometheus_url: str) -> None:
    spec = CanaryPolicySpec(
        checks=[
            *CanaryPolicySpec().checks,
            MetricCheck(metric=Metric.CACHE_HIT_RATE, relative_to_stable=0.8),
        ],
        interval_seconds=60,
    )
    observed = Observed("llama", CANARY, STABLE, canary_ready=True, weight=20)
    measured, error = measure(
        HttpPrometheus(prometheus_url), namespace=NS, observed=observed, spec=spec, at=END,
        config=QueryConfig(),
    )  # fmt: skip
    assert error is None and measured is not None
    assert measured.canary.ttft_p95 == pytest.approx(0.3)
    assert measured.stable.error_rate == 0.0
    assert measured.canary.itl_p95 is None  # no ITL series were backfilled: missing, not zero
    idle = Observed("llama", IDLE, STABLE, canary_ready=True, weight=20)
    measured, error = measure(
        HttpPrometheus(prometheus_url), namespace=NS, observed=idle, spec=spec, at=END,
        config=QueryConfig(),
    )  # fmt: skip
    assert measured is not None and measured.canary.requests == 0.0
    assert measured.canary.ttft_p95 is None and measured.canary.error_rate is None


def test_beside_a_baseline_the_window_measures_it_apart_from_the_stable(
    prometheus_url: str,
) -> None:
    observed = Observed("llama", CANARY, STABLE, canary_ready=True, weight=20)
    measured, error = measure(
        HttpPrometheus(prometheus_url), namespace=NS, observed=observed,
        spec=CanaryPolicySpec(interval_seconds=60), at=END, config=QueryConfig(),
        with_baseline=True,
    )  # fmt: skip
    assert error is None and measured is not None and measured.baseline is not None
    assert (measured.stable.requests, measured.baseline.requests) == (400.0, 200.0)
    assert measured.stable.ttft_p95 == pytest.approx(0.175)
    assert measured.baseline.ttft_p95 == pytest.approx(0.1875)
    assert measured.baseline.error_rate == pytest.approx(0.1)
    assert measured.baseline.ttft_buckets is not None  # what the significance test reads
    assert measured.baseline.ttft_buckets[-1] == (math.inf, 400.0)


# --- HTTP failures and the retry policy, against a stub that answers with chosen statuses ---


class _Stub(BaseHTTPRequestHandler):
    replies: ClassVar[list[tuple[int, dict[str, str], bytes]]] = []
    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.seen.append(self.path)
        status, headers, body = self.replies.pop(0)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    _Stub.replies, _Stub.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


UNAVAILABLE: tuple[int, dict[str, str], bytes] = (
    503,
    {"Retry-After": "3"},
    b'{"status":"error","errorType":"unavailable","error":"x"}',
)
OK: tuple[int, dict[str, str], bytes] = (
    200,
    {},
    b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"2.5"]}]}}',
)


def test_a_503_is_retried_after_its_retry_after(stub: str) -> None:
    _Stub.replies = [UNAVAILABLE, (429, {}, b""), OK]
    slept: list[float] = []
    prom = HttpPrometheus(stub, sleep=slept.append, retry=RetryPolicy(backoff_seconds=(0.5, 1.0)))
    assert prom.scalar("up") == 2.5
    assert slept == [3.0, 1.0]
    assert _Stub.seen == ["/api/v1/query"] * 3


def test_retries_give_up_with_the_status_kept(stub: str) -> None:
    _Stub.replies = [UNAVAILABLE, UNAVAILABLE]
    prom = HttpPrometheus(stub, sleep=lambda _: None, retry=RetryPolicy(backoff_seconds=(0.1,)))
    with pytest.raises(MetricsUnavailable) as caught:
        prom.scalar("up")
    assert (caught.value.status, caught.value.error_type, caught.value.retry_after) == (
        503, "unavailable", 3.0,
    )  # fmt: skip


def test_a_422_is_not_retried(stub: str) -> None:
    _Stub.replies = [(422, {}, b'{"status":"error","errorType":"execution","error":"boom"}')]
    with pytest.raises(BadQuery) as caught:
        HttpPrometheus(stub, sleep=lambda _: pytest.fail("slept")).scalar("up")
    assert caught.value.status == 422 and "boom" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "retry_after", "attempt", "expected"),
    [
        (503, None, 1, 0.5),
        (502, None, 2, 1.0),
        (429, 4.0, 1, 4.0),
        (503, 60.0, 1, 10.0),
        (None, None, 1, 0.5),
        (503, None, 4, None),
        (400, None, 1, None),
        (422, None, 1, None),
        (404, None, 1, None),
    ],
    ids=[
        *("503-first", "502-second", "429-retry-after", "retry-after-capped"),
        *("no-response", "out-of-attempts", "400-never", "422-never", "404-never"),
    ],
)
def test_retry_policy_over_status_codes(
    status: int | None, retry_after: float | None, attempt: int, expected: float | None
) -> None:
    kind = BadQuery if status in (400, 422) else MetricsUnavailable
    error = kind("x", query="up", status=status, retry_after=retry_after)
    assert RetryPolicy().delay(error, attempt) == expected


def test_no_data_is_never_retried() -> None:
    assert RetryPolicy().delay(NoData("x", query="up"), 1) is None
