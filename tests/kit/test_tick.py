"""The kit's one error rule for a tick, over status codes, and the counters it keeps."""

from __future__ import annotations

import kopf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from radixfleet.adapters.retry import RetryPolicy
from radixfleet.adapters.route53 import Route53Error
from radixfleet.kit.errors import RETRY_SHORTLY, ConflictError, KubeError
from radixfleet.kit.kopfglue import KUBE_RETRY, retry_delay, run_tick, verbs_of
from radixfleet.kit.metrics import ControllerMetrics


def failing(error: BaseException) -> object:
    raise error


def value(metrics: ControllerMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ConflictError("changed", status=409), kopf.TemporaryError),
        (KubeError("throttled", status=429), kopf.TemporaryError),
        (KubeError("down", status=503), kopf.TemporaryError),
        (KubeError("no answer", status=None), kopf.TemporaryError),
        (KubeError("forbidden", status=403), kopf.PermanentError),
        (
            KubeError(f"denied request: not accounted yet; {RETRY_SHORTLY}", status=403),
            kopf.TemporaryError,
        ),
        (
            KubeError(f"{RETRY_SHORTLY}, said nobody: the message ends elsewhere", status=403),
            kopf.PermanentError,
        ),
        (KubeError("gone", status=404), kopf.PermanentError),
        (KubeError("invalid", status=422), kopf.PermanentError),
        (Route53Error("slow down", code="Throttling", status=400), kopf.TemporaryError),
        (Route53Error("denied", code="AccessDenied", status=403), kopf.PermanentError),
    ],
    ids=[
        "409",
        "429",
        "503",
        "no-answer",
        "403",
        "403-admission-retry-shortly",
        "403-retry-shortly-not-at-the-end",
        "404",
        "422",
        "r53-throttled",
        "r53-denied",
    ],
)
def test_errors_map_to_kopf_the_same_way_for_every_controller(
    error: Exception, kind: type[Exception]
) -> None:
    metrics = ControllerMetrics()
    with pytest.raises(kind):
        run_tick("c", lambda: failing(error), kind="X", metrics=metrics)
    label = "temporary" if kind is kopf.TemporaryError else "permanent"
    assert value(metrics, "radixfleet_controller_errors_total", controller="c", kind=label) == 1
    assert value(metrics, "radixfleet_controller_ticks_total", controller="c") == 1


def test_an_invalid_spec_is_permanent_and_named() -> None:
    class Spec(BaseModel):
        n: int

    with pytest.raises(kopf.PermanentError, match="invalid FooPolicy spec"):
        run_tick("c", lambda: Spec.model_validate({"n": "x"}), kind="FooPolicy",
                 metrics=ControllerMetrics())  # fmt: skip
    with pytest.raises(ValidationError):
        Spec.model_validate({"n": "x"})


def test_an_error_that_knows_nothing_of_retrying_is_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        run_tick("c", lambda: 1 / 0, kind="X", metrics=ControllerMetrics())


def test_temporary_errors_wait_the_retry_policys_backoff() -> None:
    waits = []
    for retry in range(len(KUBE_RETRY.backoff_seconds) + 2):
        with pytest.raises(kopf.TemporaryError) as raised:
            run_tick("c", lambda: failing(KubeError("down", status=503)), kind="X", retry=retry,
                     metrics=ControllerMetrics())  # fmt: skip
        waits.append(raised.value.delay)
    # kopf's retry count starts at 0; past the last backoff, the last one again.
    last = KUBE_RETRY.backoff_seconds[-1]
    assert waits == [*KUBE_RETRY.backoff_seconds, last, last]


def test_retry_after_is_honoured_and_capped() -> None:
    asked = KubeError("busy", status=429, retry_after=7.0)
    assert retry_delay(asked, attempt=1) == 7.0
    greedy = KubeError("busy", status=429, retry_after=3600.0)
    assert retry_delay(greedy, attempt=1) == KUBE_RETRY.max_retry_after_seconds


@settings(deadline=None)
@given(status=st.integers(min_value=100, max_value=599), attempt=st.integers(1, 20))
def test_delays_are_never_negative_and_only_for_temporary_errors(status: int, attempt: int) -> None:
    error = KubeError("x", status=status)
    delay = KUBE_RETRY.delay(error, attempt)
    assert delay is None or delay >= 0
    assert (delay is not None) <= error.temporary
    assert retry_delay(error, attempt=attempt, policy=RetryPolicy(backoff_seconds=())) == 0.0


@pytest.mark.parametrize(
    ("result", "verbs"),
    [
        (None, []),
        ([], []),
        (type("Decision", (), {"verb": "advance"})(), ["advance"]),
        (object(), ["decide"]),
    ],
    ids=["nothing-due", "no-decisions", "a-verb", "no-verb"],
)
def test_decisions_are_counted_by_verb(result: object, verbs: list[str]) -> None:
    assert verbs_of(result) == verbs
    metrics = ControllerMetrics()
    run_tick("c", lambda: result, kind="X", metrics=metrics)
    for verb in verbs:
        assert (
            value(metrics, "radixfleet_controller_decisions_total", controller="c", verb=verb) == 1
        )
