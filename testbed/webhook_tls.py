"""Serving certificates for the add-ons' admission webhooks, issued by the test bed where a
cluster runs cert-manager (``testbed.certificates`` says why and writes them into the cluster).

A webhook server reads its serving certificate from a Secret, and the API server trusts it
through the ``caBundle`` of each webhook configuration. This module makes a private CA and a
serving certificate for the DNS names asked for, signed by it. ECDSA P-256 keys: generated in
milliseconds, and accepted by the API server and by Go's TLS stack.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough to outlive any test session, short enough that a leaked test key soon expires.
VALIDITY = datetime.timedelta(days=365)
# A clock a little behind the API server's must not make a fresh certificate "not yet valid".
BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class WebhookTLS:
    """A CA certificate and a serving certificate with its key, all PEM-encoded."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def make_tls(names: list[str], *, ca_name: str, now: datetime.datetime) -> WebhookTLS:
    """A new CA called ``ca_name`` and a serving certificate it signed for ``names`` (DNS names;
    the first is also the common name)."""
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_certificate(ca_key, common_name=ca_name, now=now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _serving_certificate(key.public_key(), ca_cert, ca_key, names=names, now=now)
    return WebhookTLS(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _builder(subject: str, issuer: x509.Name, *, now: datetime.datetime) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
    )


def _ca_certificate(
    key: ec.EllipticCurvePrivateKey, *, common_name: str, now: datetime.datetime
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    return (
        _builder(common_name, name, now=now)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _serving_certificate(
    public_key: ec.EllipticCurvePublicKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    names: list[str],
    now: datetime.datetime,
) -> x509.Certificate:
    # Go's TLS stack ignores the common name and checks only the DNS names of the SAN extension.
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    return (
        _builder(names[0], ca_cert.subject, now=now)
        .public_key(public_key)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
