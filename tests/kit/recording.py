"""A recording fake of the kubernetes client: every call as (API group, resource, verb).

`RecordingApiClient` replaces the one method every generated API method of the client ends in,
so an adapter runs unchanged on top of it. Each call is recorded as the RBAC triple it needs;
answers are canned (`answers`, by triple) and the next error can be injected (`fail`). Mock at
the client's own boundary, not inside an adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client
from kubernetes.client.exceptions import ApiException

Triple = tuple[str, str, str]

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
APPLY = "application/apply-patch+yaml"


class Answer(dict[str, Any]):
    """A JSON object that also reads as the client's model objects do (`found.data`)."""

    def __getattr__(self, name: str) -> Any:
        return self.get(name)


def obj(name: str = "x", namespace: str | None = "ns", **fields: Any) -> Answer:
    """An object as the API server would answer it."""
    meta = {"name": name, "resourceVersion": "1", **({"namespace": namespace} if namespace else {})}
    return Answer({"metadata": meta, "status": {}, **fields})


def triple(method: str, path: str, query: Mapping[str, Any]) -> Triple:
    """The RBAC (group, resource, verb) of one HTTP call on the API server."""
    parts = [p for p in path.split("/") if p]
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # a namespaced resource: drop "namespaces/<ns>"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if method == "GET":
        verb = (
            "get"
            if len(rest) > 1
            else ("watch" if query.get("watch") in ("true", "True", True) else "list")
        )
    else:
        verb = _VERBS[method]
    return group, resource, verb


@dataclass
class Recorder:
    """What the fake saw and will answer."""

    calls: list[Triple] = field(default_factory=list)
    answers: dict[Triple, Any] = field(default_factory=dict)
    fail: dict[Triple, list[int]] = field(default_factory=dict)  # statuses to raise, in order

    def answer(self, key: Triple) -> Any:
        self.calls.append(key)
        pending = self.fail.get(key)
        if pending:
            raise ApiException(status=pending.pop(0), reason="injected")
        if key in self.answers:
            return self.answers[key]
        return Answer({"items": []}) if key[2] == "list" else obj()


class RecordingApiClient(client.ApiClient):
    """An ApiClient that answers from a `Recorder` instead of the network."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def _call_with_legacy_options(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # Every generated API method ends here with (method, url, headers, body, post_params);
        # the answer stands in for the deserialized one.
        method, url, headers = request[0], request[1], request[2] or {}
        parsed = urlsplit(url)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        called = triple(method, parsed.path, query)
        if headers.get("Content-Type") == APPLY:
            # A server-side apply that makes a new object needs `create` too (the API server
            # checks it then; tests/cluster/test_data_plane.py met the 403 without it).
            self.recorder.calls.append((called[0], called[1], "create"))
        return self.recorder.answer(called)
