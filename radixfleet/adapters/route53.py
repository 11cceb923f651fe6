"""Route 53 behind a small port: weighted records and health checks in, weights out.

The failover controller reads the weighted records of one name (one per region, told apart by
their set identifier, as `infra/` declares them), reads the status of their health checks, and
sets weights. Setting re-reads the records first (the re-check before a shift) and sends one
ChangeResourceRecordSets batch of UPSERTs for the records whose weight differs, each record
re-sent whole so that only its weight changes: calling it twice changes nothing the second
time, and the batch is applied all or nothing.

Errors keep Route 53's error code and HTTP status. `Throttling` and `PriorRequestNotComplete`
(both HTTP 400), 5xx and connection failures are temporary and retried through the shared
`RetryPolicy`; botocore's own retries are turned off so that the policy is the only one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from radixfleet.adapters.retry import RetryPolicy

if TYPE_CHECKING:
    from mypy_boto3_route53 import Route53Client
    from mypy_boto3_route53.type_defs import ResourceRecordSetOutputTypeDef

# Route 53 answers throttling with HTTP 400, so the code, not the status, says "try later".
THROTTLING_CODES = frozenset({"Throttling", "ThrottlingException", "PriorRequestNotComplete"})
# Route 53 calls an endpoint healthy when more than 18% of its checkers see it healthy.
HEALTHY_CHECKER_SHARE = 0.18

T = TypeVar("T")


class Route53Error(Exception):
    """A Route 53 call failed. `code` is Route 53's error code, `status` the HTTP status
    (both None when no response came)."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self._retry_after = retry_after

    @property
    def temporary(self) -> bool:
        if self.code in THROTTLING_CODES or self.status is None:
            return True
        return self.status == 429 or self.status >= 500

    @property
    def retry_after(self) -> float | None:
        return self._retry_after


class RecordNotFound(Route53Error):  # noqa: N818 (named for what happened, like NoData)
    """A weighted record the policy names does not exist: a configuration problem."""


@dataclass(frozen=True)
class WeightedRecord:
    """One weighted record of a name, with the whole record set as Route 53 returned it."""

    set_identifier: str
    weight: int
    health_check_id: str | None
    record_set: Mapping[str, Any]


@dataclass(frozen=True)
class HealthStatus:
    """A health check as its checkers last reported it."""

    healthy: bool | None  # None: no checker has reported
    checkers: int
    healthy_checkers: int


class WeightedRecords(Protocol):
    """The port: a name's weighted records, a health check's status, and setting weights."""

    def records(self, zone_id: str, name: str, record_type: str) -> dict[str, WeightedRecord]:
        """The weighted records of `name` by set identifier."""
        ...

    def health(self, health_check_id: str) -> HealthStatus:
        """What the health check's checkers see now."""
        ...

    def set_weights(
        self, zone_id: str, name: str, record_type: str, weights: Mapping[str, int]
    ) -> list[str]:
        """Set weights by set identifier; returns the identifiers actually changed."""
        ...


def fqdn(name: str) -> str:
    """A name as Route 53 writes it: lower case with the trailing dot."""
    return name.lower().rstrip(".") + "."


def health_of(observations: Sequence[Mapping[str, Any]]) -> HealthStatus:
    """Route 53's verdict from its checkers' reports ("Success: ..." or "Failure: ...")."""
    reports = [str(o.get("StatusReport", {}).get("Status", "")) for o in observations]
    ok = sum(report.startswith("Success") for report in reports)
    if not reports:
        return HealthStatus(healthy=None, checkers=0, healthy_checkers=0)
    return HealthStatus(ok / len(reports) > HEALTHY_CHECKER_SHARE, len(reports), ok)


def changes_for(
    current: Mapping[str, WeightedRecord], weights: Mapping[str, int]
) -> list[dict[str, Any]]:
    """The UPSERTs that bring `current` to `weights`; empty when nothing differs."""
    if missing := sorted(set(weights) - set(current)):
        raise RecordNotFound(f"no weighted record with set identifier {', '.join(missing)}")
    return [
        {"Action": "UPSERT", "ResourceRecordSet": {**current[sid].record_set, "Weight": weight}}
        for sid, weight in sorted(weights.items())
        if current[sid].weight != weight
    ]


def client(
    *, endpoint_url: str | None = None, region_name: str = "us-east-1", timeout_s: float = 5.0
) -> Route53Client:
    """A boto3 Route 53 client with botocore's retries off (the adapter's policy retries)."""
    config = Config(
        retries={"total_max_attempts": 1},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
    )
    return boto3.client(
        "route53", endpoint_url=endpoint_url, region_name=region_name, config=config
    )


@dataclass
class AwsRoute53:
    """The port on boto3. Every call goes through `retry`; `sleep` is injected."""

    client: Route53Client
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    comment: str = "radixfleet failover"
    page_size: int = 100

    def records(self, zone_id: str, name: str, record_type: str) -> dict[str, WeightedRecord]:
        found: dict[str, WeightedRecord] = {}
        start: dict[str, str] = {"StartRecordName": fqdn(name), "StartRecordType": record_type}
        starts: list[dict[str, str]] = []
        while start not in starts:
            page = self._call(
                f"list records of {name}",
                lambda s=start: self.client.list_resource_record_sets(  # type: ignore[misc]
                    HostedZoneId=zone_id, MaxItems=str(self.page_size), **s
                ),
            )
            sets = page["ResourceRecordSets"]
            found |= _weighted(sets, name=name, record_type=record_type)
            if not page["IsTruncated"] or not _same(sets, name, record_type):
                return found
            starts.append(start)
            start = _next_page(page)
        # A server that ignores StartRecordIdentifier hands out the same page forever.
        raise Route53Error(f"list records of {name}: paging does not advance past {start}")

    def health(self, health_check_id: str) -> HealthStatus:
        answer = self._call(
            f"health check {health_check_id}",
            lambda: self.client.get_health_check_status(HealthCheckId=health_check_id),
        )
        return health_of(list(answer["HealthCheckObservations"]))

    def set_weights(
        self, zone_id: str, name: str, record_type: str, weights: Mapping[str, int]
    ) -> list[str]:
        # Re-read right before writing: the batch is built from what is there now, so a
        # record edited since the decision keeps its edits and only its weight changes.
        changes = changes_for(self.records(zone_id, name, record_type), weights)
        if not changes:
            return []
        batch: Any = {"Comment": self.comment, "Changes": changes}
        self._call(
            f"set weights of {name}",
            lambda: self.client.change_resource_record_sets(
                HostedZoneId=zone_id, ChangeBatch=batch
            ),
        )
        return [c["ResourceRecordSet"]["SetIdentifier"] for c in changes]

    def _call(self, what: str, call: Callable[[], T]) -> T:
        attempt = 1
        while True:
            try:
                return _translated(what, call)
            except Route53Error as error:
                wait = self.retry.delay(error, attempt)
                if wait is None:
                    raise
                self.sleep(wait)
                attempt += 1


def _translated(what: str, call: Callable[[], T]) -> T:
    """`call()`, with botocore's exceptions turned into `Route53Error`."""
    try:
        return call()
    except ClientError as exc:
        error, meta = exc.response.get("Error", {}), exc.response.get("ResponseMetadata", {})
        code, status = error.get("Code"), meta.get("HTTPStatusCode")
        retry_after = _seconds(meta.get("HTTPHeaders", {}).get("retry-after"))
        kind = RecordNotFound if code == "NoSuchHostedZone" else Route53Error
        message = f"{what}: {code} (HTTP {status}) {error.get('Message', '')}".rstrip()
        raise kind(message, code=code, status=status, retry_after=retry_after) from exc
    except BotoCoreError as exc:  # no answer at all: connection refused, timeout
        raise Route53Error(f"{what}: {exc}") from exc


def _weighted(
    sets: list[ResourceRecordSetOutputTypeDef], *, name: str, record_type: str
) -> dict[str, WeightedRecord]:
    return {
        s["SetIdentifier"]: WeightedRecord(
            set_identifier=s["SetIdentifier"],
            weight=int(s["Weight"]),
            health_check_id=s.get("HealthCheckId"),
            record_set=dict(s),
        )
        for s in sets
        if _is(s, name, record_type) and "SetIdentifier" in s and "Weight" in s
    }


def _is(record_set: Mapping[str, Any], name: str, record_type: str) -> bool:
    return fqdn(str(record_set["Name"])) == fqdn(name) and record_set["Type"] == record_type


def _same(sets: list[ResourceRecordSetOutputTypeDef], name: str, record_type: str) -> bool:
    # Records come sorted by name and type: once another one shows, ours are all read.
    return bool(sets) and _is(sets[-1], name, record_type)


def _next_page(page: Any) -> dict[str, str]:
    start = {"StartRecordName": page["NextRecordName"], "StartRecordType": page["NextRecordType"]}
    if "NextRecordIdentifier" in page:
        start["StartRecordIdentifier"] = page["NextRecordIdentifier"]
    return start


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
