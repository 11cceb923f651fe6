"""An in-memory Prometheus for controller tests: canned answers, recorded queries, next error.

Answers are keyed by the exact PromQL; a query without an answer raises NoData, as a real
server with no matching series would. Mock at this boundary, not inside an HTTP client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from radixfleet.adapters.prometheus import (
    AmbiguousResult,
    NoData,
    NotFinite,
    PrometheusError,
    Sample,
)

Answer = float | list[Sample] | PrometheusError


@dataclass
class FakePrometheus:
    """Implements the `Prometheus` port from a dict of answers; keeps every call it saw."""

    answers: dict[str, Answer] = field(default_factory=dict)
    online: bool = True
    queries: list[tuple[str, datetime | None]] = field(default_factory=list)
    next_error: PrometheusError | None = None

    def vector(self, promql: str, *, at: datetime | None = None) -> list[Sample]:
        self.queries.append((promql, at))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        answer = self.answers.get(promql, [])
        if isinstance(answer, PrometheusError):
            raise answer
        return answer if isinstance(answer, list) else [Sample(labels={}, value=answer)]

    def scalar(self, promql: str, *, at: datetime | None = None) -> float:
        samples = self.vector(promql, at=at)
        if not samples:
            raise NoData(f"no series for {promql}", query=promql)
        if len(samples) > 1:
            raise AmbiguousResult(f"{len(samples)} series", query=promql)
        if not math.isfinite(samples[0].value):
            raise NotFinite("not finite", query=promql, value=samples[0].value)
        return samples[0].value

    def is_online(self) -> bool:
        return self.online
