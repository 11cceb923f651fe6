"""TEST BED STAND-IN FOR CERT-MANAGER: the certificates infra's charts ask cert-manager for,
issued by the test bed.

KServe's charts, installed here as infra installs them, get their webhooks' serving certificates
from cert-manager: a ``Certificate`` names the Secret to write and the DNS names, and the
annotation ``cert-manager.io/inject-ca-from: <namespace>/<certificate>`` on each webhook
configuration asks cert-manager's CA injector to set its ``caBundle``. cert-manager itself cannot
be built here: its three commands (controller, webhook, cainjector) are Go modules of their own
that the module proxy does not serve (``go mod download
github.com/cert-manager/cert-manager/cmd/controller@v1.21.2``: 404 Not Found). Its main module
is served, and ships its CRDs: the test cluster installs those, so the charts' ``Certificate``
and ``Issuer`` are admitted and stored as on a real cluster, and :func:`issue` then does what
cert-manager would do with them: writes each Certificate's Secret (``tls.crt``, ``tls.key``,
``ca.crt``) and the CA into every ``caBundle`` that names it. One difference: the chart's
``selfSigned`` Issuer would sign the serving certificate with its own key, where this signs it
with a CA made for it; clients trust either the same way, through ``caBundle``.

Deciding what to write is pure (:func:`certificate_secret`, :func:`ca_bundle_patches`); only
:func:`issue` talks to the cluster.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.cluster import Cluster
from testbed.webhook_tls import WebhookTLS, make_tls

Obj = dict[str, Any]
INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
CERTIFICATES = "certificates.cert-manager.io"
# The kinds cert-manager's CA injector writes a caBundle into.
INJECTABLE = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations",
              "customresourcedefinitions")  # fmt: skip


def certificate_secret(certificate: Mapping[str, Any], tls: WebhookTLS) -> Obj:
    """The Secret cert-manager writes for ``certificate``: type TLS, with the CA beside it."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    metadata, spec = certificate["metadata"], certificate["spec"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": spec["secretName"], "namespace": metadata["namespace"],
                     "annotations": {"cert-manager.io/certificate-name": metadata["name"]}},
        "data": {"tls.crt": b64(tls.cert_pem), "tls.key": b64(tls.key_pem),
                 "ca.crt": b64(tls.ca_pem)},
    }  # fmt: skip


def dns_names(certificate: Mapping[str, Any]) -> list[str]:
    """The names a Certificate asks for, its common name first when it has one."""
    spec = certificate["spec"]
    common = [spec["commonName"]] if spec.get("commonName") else []
    return list(dict.fromkeys([*common, *spec.get("dnsNames", [])]))


def ca_bundle_patches(
    objects: Sequence[Mapping[str, Any]], bundles: Mapping[str, bytes]
) -> list[tuple[str, str, list[Obj]]]:
    """For each object whose ``inject-ca-from`` names a Certificate in ``bundles`` (keyed
    ``<namespace>/<name>``): its kind, its name and the JSON patch that sets that CA as the
    ``caBundle`` of each of its webhooks (a CRD: its conversion webhook). Objects that name
    none are left alone."""
    patches = []
    for obj in objects:
        source = (obj["metadata"].get("annotations") or {}).get(INJECT_CA_FROM)
        if not isinstance(source, str) or source not in bundles:
            continue
        bundle = base64.b64encode(bundles[source]).decode()
        ops = [{"op": "add", "path": f"{path}/caBundle", "value": bundle}
               for path in _client_config_paths(obj)]  # fmt: skip
        if ops:
            patches.append((obj["kind"], obj["metadata"]["name"], ops))
    return patches


def _client_config_paths(obj: Mapping[str, Any]) -> list[str]:
    if obj["kind"] == "CustomResourceDefinition":
        conversion = obj["spec"].get("conversion") or {}
        webhook = conversion.get("webhook") if conversion.get("strategy") == "Webhook" else None
        return ["/spec/conversion/webhook/clientConfig"] if webhook else []
    return [f"/webhooks/{i}/clientConfig" for i, _ in enumerate(obj.get("webhooks") or [])]


def issue(running: Cluster, *, namespace: str, now: datetime.datetime | None = None) -> int:
    """Issue every Certificate in ``namespace`` that has no Secret yet, and inject the CA of
    each into the objects that ask for it; returns how many were issued."""
    now = now or datetime.datetime.now(datetime.UTC)
    certificates = _items(running, CERTIFICATES, "-n", namespace)
    existing = {s["metadata"]["name"] for s in _items(running, "secrets", "-n", namespace)}
    bundles: dict[str, bytes] = {}
    secrets = []
    for certificate in certificates:
        if certificate["spec"]["secretName"] in existing:
            continue
        name = certificate["metadata"]["name"]
        tls = make_tls(dns_names(certificate), ca_name=f"test bed CA for {namespace}/{name}",
                       now=now)  # fmt: skip
        secrets.append(certificate_secret(certificate, tls))
        bundles[f"{namespace}/{name}"] = tls.ca_pem
    if secrets:
        running.kubectl("apply", "--server-side", "--field-manager=cert-manager-stand-in",
                        "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                     "items": secrets}))  # fmt: skip
    for kind, name, ops in ca_bundle_patches(_items(running, ",".join(INJECTABLE)), bundles):
        running.kubectl("patch", kind.lower(), name, "--type=json", "-p", json.dumps(ops))
    return len(secrets)


def _items(running: Cluster, resource: str, *args: str) -> list[Obj]:
    found = running.kubectl("get", resource, *args, "-o", "json")
    items: list[Obj] = json.loads(found.stdout).get("items", [])
    return items
