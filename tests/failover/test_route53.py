"""The Route 53 adapter against moto's server mode: real HTTP, boto3 unchanged.

Throttling, PriorRequestNotComplete, 5xx and refused connections come from a loopback proxy
in front of moto (moto cannot throttle), so retries are tested on the wire, through the
adapter's RetryPolicy, with the sleeps recorded instead of slept.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from radixfleet.adapters.retry import RetryPolicy
from radixfleet.adapters.route53 import (
    AwsRoute53,
    RecordNotFound,
    Route53Error,
    changes_for,
    client,
    fqdn,
    health_of,
)
from tests.failover.aws import (
    DUMMY_CREDENTIALS,
    PRIOR_REQUEST,
    THROTTLING,
    UNAVAILABLE,
    Fault,
    FaultyProxy,
    Zone,
    faulty_proxy,
    moto_server,
    zone_with_weighted_records,
)

REGIONS = ("us-east-1", "eu-west-1", "ap-northeast-1")
_zones = itertools.count()


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in DUMMY_CREDENTIALS.items():
            patch.setenv(key, value)
        yield


@pytest.fixture(scope="module")
def moto(aws_env: None) -> Iterator[tuple[str, int]]:
    with moto_server() as address:
        yield address


@pytest.fixture
def proxied(moto: tuple[str, int]) -> Iterator[tuple[FaultyProxy, str]]:
    with faulty_proxy(moto) as pair:
        yield pair


@pytest.fixture
def zone(moto: tuple[str, int]) -> Zone:
    host, port = moto
    # Every test gets its own zone (and model name), so tests never see each other's writes.
    model = f"m{next(_zones)}"
    return zone_with_weighted_records(f"http://{host}:{port}", regions=REGIONS, model=model)


def adapter(url: str, **kwargs: Any) -> tuple[AwsRoute53, list[float]]:
    slept: list[float] = []
    kwargs.setdefault("retry", RetryPolicy(backoff_seconds=(0.5, 1.0, 2.0)))
    return AwsRoute53(client(endpoint_url=url, timeout_s=5), sleep=slept.append, **kwargs), slept


def test_reads_the_weighted_records_of_the_name_only(
    proxied: tuple[FaultyProxy, str], zone: Zone
) -> None:
    r53, _ = adapter(proxied[1])
    records = r53.records(zone.zone_id, zone.name, "CNAME")
    assert set(records) == set(REGIONS)
    assert {sid: r.weight for sid, r in records.items()} == dict.fromkeys(REGIONS, 100)
    assert {sid: r.health_check_id for sid, r in records.items()} == zone.health_checks
    assert records["eu-west-1"].record_set["TTL"] == 10


def test_reads_names_in_any_case(proxied: tuple[FaultyProxy, str], zone: Zone) -> None:
    r53, _ = adapter(proxied[1])
    assert set(r53.records(zone.zone_id, zone.name.upper() + ".", "CNAME")) == set(REGIONS)


def test_paging_that_does_not_advance_is_an_error_not_a_loop(
    proxied: tuple[FaultyProxy, str], zone: Zone
) -> None:
    # moto ignores StartRecordIdentifier, so pages inside one weighted name repeat there.
    r53, _ = adapter(proxied[1], page_size=1)
    with pytest.raises(Route53Error, match="paging does not advance"):
        r53.records(zone.zone_id, zone.name, "CNAME")


def test_sets_only_the_weights_that_differ_and_nothing_else(
    proxied: tuple[FaultyProxy, str], zone: Zone
) -> None:
    r53, _ = adapter(proxied[1])
    before = r53.records(zone.zone_id, zone.name, "CNAME")
    wanted = {"us-east-1": 0, "eu-west-1": 100, "ap-northeast-1": 150}
    changed = r53.set_weights(zone.zone_id, zone.name, "CNAME", wanted)
    assert changed == ["ap-northeast-1", "us-east-1"]
    after = r53.records(zone.zone_id, zone.name, "CNAME")
    assert {sid: r.weight for sid, r in after.items()} == wanted
    for sid in REGIONS:  # TTL, target and health check untouched
        assert {**after[sid].record_set, "Weight": 0} == {**before[sid].record_set, "Weight": 0}


def test_setting_the_same_weights_again_changes_nothing(
    proxied: tuple[FaultyProxy, str], zone: Zone
) -> None:
    proxy, url = proxied
    r53, _ = adapter(url)
    wanted = {"us-east-1": 0, "eu-west-1": 100, "ap-northeast-1": 100}
    r53.set_weights(zone.zone_id, zone.name, "CNAME", wanted)
    posts = sum(1 for m, _, _ in proxy.seen if m == "POST")
    assert r53.set_weights(zone.zone_id, zone.name, "CNAME", wanted) == []
    assert sum(1 for m, _, _ in proxy.seen if m == "POST") == posts


def test_a_missing_record_changes_nothing(proxied: tuple[FaultyProxy, str], zone: Zone) -> None:
    r53, _ = adapter(proxied[1])
    with pytest.raises(RecordNotFound, match="sa-east-1"):
        r53.set_weights(zone.zone_id, zone.name, "CNAME", {"us-east-1": 0, "sa-east-1": 100})
    weights = {s: r.weight for s, r in r53.records(zone.zone_id, zone.name, "CNAME").items()}
    assert weights == dict.fromkeys(REGIONS, 100)


def test_reads_health_check_status(proxied: tuple[FaultyProxy, str], zone: Zone) -> None:
    r53, _ = adapter(proxied[1])
    status = r53.health(zone.health_checks["eu-west-1"])
    assert status.healthy is True  # moto's checkers always report success
    assert status.checkers >= 1


@pytest.mark.parametrize(
    "faults",
    [
        [THROTTLING, THROTTLING],
        [PRIOR_REQUEST],
        [UNAVAILABLE, THROTTLING, Fault(500, "InternalFailure")],
    ],
    ids=["throttled-twice", "prior-request-not-complete", "5xx-and-throttling"],
)
def test_temporary_errors_are_retried_by_the_policy(
    proxied: tuple[FaultyProxy, str], zone: Zone, faults: list[Fault]
) -> None:
    proxy, url = proxied
    r53, slept = adapter(url)
    proxy.fail_next(*faults)
    wanted = {"us-east-1": 0, "eu-west-1": 100, "ap-northeast-1": 100}
    assert r53.set_weights(zone.zone_id, zone.name, "CNAME", wanted) == ["us-east-1"]
    assert slept == [0.5, 1.0, 2.0][: len(faults)]
    answered = [status for _, _, status in proxy.seen]
    assert answered == [f.status for f in faults if not f.on] + [200] + [
        f.status for f in faults if f.on
    ] + [200]


def test_retry_after_is_honoured(proxied: tuple[FaultyProxy, str], zone: Zone) -> None:
    proxy, url = proxied
    r53, slept = adapter(url)
    proxy.fail_next(Fault(503, "ServiceUnavailable", retry_after="0.25"))
    assert set(r53.records(zone.zone_id, zone.name, "CNAME")) == set(REGIONS)
    assert slept == [0.25]


def test_throttling_past_the_policy_raises_a_temporary_error(
    proxied: tuple[FaultyProxy, str], zone: Zone
) -> None:
    proxy, url = proxied
    r53, slept = adapter(url, retry=RetryPolicy(backoff_seconds=(0.1, 0.2)))
    proxy.fail_next(*[THROTTLING] * 3)
    with pytest.raises(Route53Error) as raised:
        r53.records(zone.zone_id, zone.name, "CNAME")
    error = raised.value
    assert (error.code, error.status, error.temporary) == ("Throttling", 400, True)
    assert slept == [0.1, 0.2]
    assert len(proxy.seen) == 3


@pytest.mark.parametrize("code", ["InvalidChangeBatch", "InvalidInput", "AccessDenied"])
def test_permanent_errors_are_not_retried(
    proxied: tuple[FaultyProxy, str], zone: Zone, code: str
) -> None:
    proxy, url = proxied
    r53, slept = adapter(url)
    proxy.fail_next(Fault(403 if code == "AccessDenied" else 400, code, on="/rrset/"))
    with pytest.raises(Route53Error) as raised:
        r53.set_weights(zone.zone_id, zone.name, "CNAME", {"us-east-1": 1})
    assert raised.value.code == code and not raised.value.temporary
    assert slept == []


def test_no_hosted_zone_is_permanent(proxied: tuple[FaultyProxy, str]) -> None:
    r53, slept = adapter(proxied[1])
    with pytest.raises(RecordNotFound) as raised:
        r53.records("ZNOSUCHZONE", "x.example.com", "CNAME")
    assert raised.value.code == "NoSuchHostedZone" and slept == []


def test_an_unreachable_endpoint_is_temporary_and_retried(aws_env: None) -> None:
    r53, slept = adapter("http://127.0.0.1:9", retry=RetryPolicy(backoff_seconds=(0.1,)))
    with pytest.raises(Route53Error) as raised:
        r53.health("abc")
    assert raised.value.status is None and raised.value.temporary
    assert slept == [0.1]


# ---- pure parts ------------------------------------------------------------------------------


def _observations(*reports: str) -> list[dict[str, Any]]:
    return [{"Region": "us-east-1", "StatusReport": {"Status": r}} for r in reports]


@pytest.mark.parametrize(
    ("reports", "healthy"),
    [
        ((), None),
        (("Success: HTTP Status Code 200",) * 8, True),
        (("Failure: Connection timed out",) * 8, False),
        (("Success: 200",) * 2 + ("Failure: 503",) * 8, True),  # 20% > 18%
        (("Success: 200",) * 1 + ("Failure: 503",) * 8, False),  # 11%
    ],
    ids=["no-reports", "all-success", "all-failure", "20-percent-ok", "11-percent-ok"],
)
def test_health_follows_route53s_18_percent_rule(
    reports: tuple[str, ...], healthy: bool | None
) -> None:
    assert health_of(_observations(*reports)).healthy is healthy


@pytest.mark.parametrize(
    ("code", "status", "temporary"),
    [
        ("Throttling", 400, True),
        ("PriorRequestNotComplete", 400, True),
        ("ServiceUnavailable", 503, True),
        ("InternalFailure", 500, True),
        (None, None, True),
        ("InvalidChangeBatch", 400, False),
        ("AccessDenied", 403, False),
        ("NoSuchHealthCheck", 404, False),
    ],
)
def test_which_errors_are_temporary(code: str | None, status: int | None, temporary: bool) -> None:
    error = Route53Error("x", code=code, status=status)
    assert error.temporary is temporary
    assert (RetryPolicy().delay(error, 1) is not None) is temporary


def test_changes_for_is_empty_when_nothing_differs() -> None:
    from radixfleet.adapters.route53 import WeightedRecord

    current = {"a": WeightedRecord("a", 5, None, {"Name": "x.", "SetIdentifier": "a", "Weight": 5})}
    assert changes_for(current, {"a": 5}) == []
    assert changes_for(current, {"a": 6})[0]["ResourceRecordSet"]["Weight"] == 6
    assert fqdn("X.Example.com") == "x.example.com."
