"""Route 53 for tests: moto's server on loopback, and a proxy in front of it that fails on cue.

moto cannot throttle, so `FaultyProxy` answers the next calls itself (400 Throttling, 400
PriorRequestNotComplete, 503, any Route 53 error) and forwards the rest to moto unchanged:
boto3 talks real HTTP all the way, to the proxy's port. `zone_with_weighted_records` creates
what `infra/components/aws/dns.py` declares: per region a health check and a weighted CNAME
record of the global name, set identifier = region.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from moto.server import ThreadedMotoServer

from radixfleet.adapters.route53 import client

NAMESPACE = "https://route53.amazonaws.com/doc/2013-04-01/"
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class Fault:
    """One canned answer: an HTTP status and a Route 53 error code, for paths containing `on`."""

    status: int
    code: str
    on: str = ""
    retry_after: str | None = None

    def body(self) -> bytes:
        kind = "Sender" if self.status < 500 else "Receiver"
        return (
            f'<?xml version="1.0"?>\n<ErrorResponse xmlns="{NAMESPACE}"><Error><Type>{kind}</Type>'
            f"<Code>{self.code}</Code><Message>injected by the test proxy</Message></Error>"
            "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
        ).encode()


THROTTLING = Fault(400, "Throttling")
PRIOR_REQUEST = Fault(400, "PriorRequestNotComplete", on="/rrset/")  # the change batch
UNAVAILABLE = Fault(503, "ServiceUnavailable")


@dataclass
class FaultyProxy:
    """A loopback HTTP proxy to `upstream` that answers queued faults first."""

    upstream: tuple[str, int]
    faults: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(self, *faults: Fault) -> None:
        with self.lock:
            self.faults.extend(faults)

    def take_fault(self, path: str) -> Fault | None:
        with self.lock:
            for i, fault in enumerate(self.faults):
                if fault.on in path:
                    return self.faults.pop(i)
        return None

    def record(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self.seen.append((method, path, status))

    def forward(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=10)
        try:
            conn.request(method, path, body=body or None, headers=dict(headers))
            answer = conn.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            conn.close()


def _handler(proxy: FaultyProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fault = proxy.take_fault(self.path)
            if fault is not None:
                self._answer(fault.status, [("Content-Type", "text/xml")], fault.body(), fault)
                return
            status, headers, payload = proxy.forward(
                self.command, self.path, dict(self.headers.items()), body
            )
            self._answer(status, headers, payload, None)

        def _answer(
            self, status: int, headers: Sequence[tuple[str, str]], body: bytes, fault: Fault | None
        ) -> None:
            proxy.record(self.command, self.path, status)
            self.send_response(status)
            for key, value in headers:
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            if fault is not None and fault.retry_after is not None:
                self.send_header("Retry-After", fault.retry_after)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _serve  # noqa: N815 (http.server's naming)

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output clean

    return Handler


@contextmanager
def moto_server() -> Iterator[tuple[str, int]]:
    """moto's server on a free loopback port, stopped on exit."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield server.get_host_and_port()
    finally:
        server.stop()


@contextmanager
def faulty_proxy(upstream: tuple[str, int]) -> Iterator[tuple[FaultyProxy, str]]:
    """A `FaultyProxy` on a free loopback port and its URL."""
    proxy = FaultyProxy(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    # A short poll keeps shutdown (once per test) from costing half a second.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield proxy, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class Zone:
    """A hosted zone with one model's weighted records."""

    zone_id: str
    name: str
    health_checks: dict[str, str]  # region -> health check id


def zone_with_weighted_records(
    endpoint_url: str,
    *,
    regions: Sequence[str],
    model: str = "llama",
    domain: str = "models.example.com",
    weight: int = 100,
    ttl: int = 10,
) -> Zone:
    """The records `infra/` declares for one model, plus neighbours that must stay untouched."""
    r53 = client(endpoint_url=endpoint_url)
    zone_id = r53.create_hosted_zone(Name=domain, CallerReference=f"{model}-zone")["HostedZone"][
        "Id"
    ].split("/")[-1]
    name = f"{model}.{domain}"
    checks = {
        region: r53.create_health_check(
            CallerReference=f"{model}-{region}",
            HealthCheckConfig={
                "Type": "HTTPS", "FullyQualifiedDomainName": f"{model}.{region}.{domain}",
                "Port": 443, "ResourcePath": "/health", "RequestInterval": 30,
                "FailureThreshold": 3,
            },
        )["HealthCheck"]["Id"]
        for region in regions
    }  # fmt: skip
    changes: list[Any] = [
        _upsert(name, "CNAME", ttl, f"{model}.{region}.{domain}",
                SetIdentifier=region, Weight=weight, HealthCheckId=checks[region])
        for region in regions
    ]  # fmt: skip
    # Neighbours: a longer name sorting right after ours, and a plain record of another type.
    changes.append(_upsert(f"{model}-canary.{domain}", "CNAME", 60, f"canary.{domain}"))
    changes.append(_upsert(name, "TXT", 60, '"owner=radixfleet"'))
    r53.change_resource_record_sets(HostedZoneId=zone_id, ChangeBatch={"Changes": changes})
    return Zone(zone_id=zone_id, name=name, health_checks=checks)


def _upsert(name: str, kind: str, ttl: int, value: str, **extra: Any) -> dict[str, Any]:
    record = {"Name": name, "Type": kind, "TTL": ttl, "ResourceRecords": [{"Value": value}]}
    return {"Action": "UPSERT", "ResourceRecordSet": record | extra}
