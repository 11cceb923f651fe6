"""Prometheus behind a small port: instant queries in, plain numbers or typed errors out.

Every controller that reads PromQL (canary, autoscale, failover) depends on the `Prometheus`
protocol, not on HTTP. The errors say what a caller may do with a failed query:

- `NoData` (an empty result) and `NotFinite` (NaN or an infinity, e.g. a quantile over a
  window without requests) mean "nothing to judge": decisions halt, they never count as a pass
  or a failure (Flagger's ErrNoValuesFound rule).
- `MetricsUnavailable` means Prometheus did not answer: it keeps the HTTP status, Prometheus'
  `errorType` and `Retry-After`, and says whether a retry can succeed. `BadQuery` (400, 422)
  is the permanent kind: the query itself is wrong.

Retrying is a policy (`radixfleet.adapters.retry.RetryPolicy`, shared with Route 53), pure and
tested over status codes; the sleep is injected so that tests and the twin never wait.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import requests

# Re-exported: callers of this adapter name the policy here.
from radixfleet.adapters.retry import NO_RETRY as NO_RETRY
from radixfleet.adapters.retry import RetryPolicy as RetryPolicy

QUERY_PATH = "/api/v1/query"
READY_PATH = "/-/ready"
# 429 and 5xx can succeed later; 400 (bad_data) and 422 (execution error) never will.
TEMPORARY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels (without `__name__` if aggregated) and value."""

    labels: Mapping[str, str]
    value: float


class PrometheusError(Exception):
    """Base of every error of this adapter; `query` is the PromQL that failed."""

    def __init__(self, message: str, *, query: str) -> None:
        super().__init__(message)
        self.query = query


# Named for what happened, like Flagger's sentinels; the base class carries the "Error".
class NoData(PrometheusError):  # noqa: N818
    """The query returned no series: the metric is absent or nothing matched. Halt."""


class NotFinite(NoData):
    """The query returned NaN or an infinity, as ratios and quantiles do over no traffic. Halt."""

    def __init__(self, message: str, *, query: str, value: float) -> None:
        super().__init__(message, query=query)
        self.value = value


class AmbiguousResult(PrometheusError):  # noqa: N818
    """A scalar was asked for but several series came back: the query does not aggregate."""


class MetricsUnavailable(PrometheusError):  # noqa: N818
    """Prometheus did not answer the query. `status` is None when no HTTP response came."""

    def __init__(
        self,
        message: str,
        *,
        query: str,
        status: int | None = None,
        error_type: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, query=query)
        self.status = status
        self.error_type = error_type
        self.retry_after = retry_after

    @property
    def temporary(self) -> bool:
        return self.status is None or self.status in TEMPORARY_STATUSES


class BadQuery(MetricsUnavailable):
    """Prometheus refused the query (400 bad_data, 422 execution): retrying cannot help."""


class Prometheus(Protocol):
    """The port: an instant vector, a single number, and whether the server is up."""

    def vector(self, promql: str, *, at: datetime | None = None) -> list[Sample]:
        """Every series of an instant query, values as they are (NaN included); may be empty."""
        ...

    def scalar(self, promql: str, *, at: datetime | None = None) -> float:
        """The one finite value of a query; raises NoData, NotFinite or AmbiguousResult."""
        ...

    def is_online(self) -> bool:
        """Whether the server answers its readiness endpoint."""
        ...


@dataclass
class HttpPrometheus:
    """The port over Prometheus' HTTP API (`/api/v1/query`), with a reusable requests session."""

    url: str
    timeout_seconds: float = 5.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    session: requests.Session = field(default_factory=requests.Session)
    headers: Mapping[str, str] = field(default_factory=dict)

    def vector(self, promql: str, *, at: datetime | None = None) -> list[Sample]:
        data = self._query_with_retries(promql, at)
        kind, result = data.get("resultType"), data.get("result") or []
        if kind in ("scalar", "string"):
            return [Sample(labels={}, value=_number(result[1]))]
        if kind != "vector":
            raise BadQuery(f"expected an instant vector, got {kind}", query=promql)
        return [Sample(labels=s.get("metric", {}), value=_number(s["value"][1])) for s in result]

    def scalar(self, promql: str, *, at: datetime | None = None) -> float:
        samples = self.vector(promql, at=at)
        if not samples:
            raise NoData(f"no series for {promql}", query=promql)
        if len(samples) > 1:
            raise AmbiguousResult(f"{len(samples)} series for {promql}", query=promql)
        value = samples[0].value
        if not math.isfinite(value):
            raise NotFinite(f"{value} for {promql}", query=promql, value=value)
        return value

    def is_online(self) -> bool:
        try:
            response = self.session.get(
                self.url.rstrip("/") + READY_PATH,
                headers=dict(self.headers),
                timeout=self.timeout_seconds,
            )
        except requests.RequestException:
            return False
        return response.status_code == 200

    def _query_with_retries(self, promql: str, at: datetime | None) -> dict[str, Any]:
        attempt = 1
        while True:
            try:
                return self._query_once(promql, at)
            except MetricsUnavailable as error:
                wait = self.retry.delay(error, attempt)
                if wait is None:
                    raise
                self.sleep(wait)
                attempt += 1

    def _query_once(self, promql: str, at: datetime | None) -> dict[str, Any]:
        params = {"query": promql, "timeout": f"{round(self.timeout_seconds * 1000)}ms"}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        try:
            response = self.session.post(
                self.url.rstrip("/") + QUERY_PATH,
                data=params,
                headers=dict(self.headers),
                timeout=self.timeout_seconds,
            )
        except requests.RequestException as exc:
            raise MetricsUnavailable(f"Prometheus unreachable: {exc}", query=promql) from exc
        return _data(response, promql)


def _data(response: requests.Response, promql: str) -> dict[str, Any]:
    """The `data` of a successful answer; otherwise the error with everything the server said."""
    body = _json(response)
    if response.status_code == 200 and body.get("status") == "success":
        data: dict[str, Any] = body.get("data", {})
        return data
    status = response.status_code
    error_type = body.get("errorType")
    message = f"HTTP {status} {error_type or ''}: {body.get('error') or response.reason}"
    kind = BadQuery if status in (400, 422) else MetricsUnavailable
    raise kind(
        message.replace("  ", " "),
        query=promql,
        status=status,
        error_type=error_type,
        retry_after=_retry_after(response.headers.get("Retry-After")),
    )


def _json(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _retry_after(value: str | None) -> float | None:
    # Only the delta-seconds form: Prometheus and the proxies in front of it send that one.
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _number(text: Any) -> float:
    """Prometheus sends sample values as strings: "1.5", "NaN", "+Inf"."""
    return float(text)
