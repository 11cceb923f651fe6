"""Pod discovery for the test cluster's Prometheus, over Prometheus' HTTP service discovery.

Debian's Prometheus (2.42) is built without Kubernetes service discovery: `promtool check
config` refuses `kubernetes_sd_configs` ("field kubernetes_sd_configs not found in type
config.ScrapeConfig"). Rather than build Prometheus from its Go module (one more long cold
build), this sidecar lists the cluster's pods and answers Prometheus' `http_sd_configs` with the
targets and `__meta_kubernetes_*` labels that `kubernetes_sd_configs` with `role: pod` gives
(one target per declared container port), so the relabeling prometheus-operator writes for a
PodMonitor works unchanged. Discovery is the only part replaced: scraping, storage and PromQL
are Prometheus' own.

Standard library only: it runs from a ConfigMap in any image that has python3, with the pod's
service account (`GET /api/v1/pods`, or per namespace with `?namespace=NS`).
"""

from __future__ import annotations

import json
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
API = "https://kubernetes.default.svc"
PORT = 8000
META = "__meta_kubernetes_"


def sanitized(name: str) -> str:
    """A label name as Prometheus' discovery writes it: anything but [a-zA-Z0-9_] becomes `_`."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)


def _pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    meta, status = pod["metadata"], pod.get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    found = {
        f"{META}namespace": meta["namespace"],
        f"{META}pod_name": meta["name"],
        f"{META}pod_ip": status.get("podIP", ""),
        f"{META}pod_uid": meta.get("uid", ""),
        f"{META}pod_node_name": pod.get("spec", {}).get("nodeName", ""),
        f"{META}pod_phase": status.get("phase", ""),
        f"{META}pod_ready": str(ready).lower(),
    }
    for kind, values in (("label", meta.get("labels")), ("annotation", meta.get("annotations"))):
        for key, value in (values or {}).items():
            found[f"{META}pod_{kind}_{sanitized(key)}"] = value
            found[f"{META}pod_{kind}present_{sanitized(key)}"] = "true"
    return found


def pod_targets(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One target group per declared container port of a pod with an IP (none without one)."""
    ip = pod.get("status", {}).get("podIP")
    if not ip:
        return []
    common, groups = _pod_labels(pod), []
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            labels = {
                **common,
                f"{META}pod_container_name": container["name"],
                f"{META}pod_container_init": "false",
                f"{META}pod_container_port_name": port.get("name", ""),
                f"{META}pod_container_port_number": str(port["containerPort"]),
                f"{META}pod_container_port_protocol": port.get("protocol", "TCP"),
            }
            groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


def targets(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [group for pod in pods for group in pod_targets(pod)]


def _list_pods(namespaces: list[str]) -> list[dict[str, Any]]:
    token = Path(f"{ACCOUNT}/token").read_text().strip()
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    paths = [f"/api/v1/namespaces/{ns}/pods" for ns in namespaces] or ["/api/v1/pods"]
    pods: list[dict[str, Any]] = []
    for path in paths:
        request = urllib.request.Request(API + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            pods += json.loads(answer.read())["items"]
    return pods


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        try:
            body, status = json.dumps(targets(_list_pods(query.get("namespace", [])))), 200
        except (OSError, ValueError, KeyError) as error:
            body, status = json.dumps({"error": str(error)}), 503
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        return  # Prometheus asks every refresh interval; nothing worth a line


def main() -> int:
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
