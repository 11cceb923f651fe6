"""The test cluster's certificates and kubeconfigs: one CA, a serving certificate per server, a
client certificate per component identity, and the service-account signing key.

kubeadm makes the same set; this module makes it in-process with ``cryptography`` (ECDSA P-256,
which is fast to generate and accepted by every component), valid for a year, because a test
cluster lives for minutes and ``make cluster`` for days at most.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Identity:
    """Who a client certificate says it is: user name (CN) and groups (O)."""

    user: str
    groups: tuple[str, ...] = ()


class Authority:
    """A CA that signs the cluster's certificates into one folder."""

    def __init__(self, folder: Path, *, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = _builder(subject, subject, self._key.public_key())
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        builder = builder.add_extension(_ca_usage(), critical=True)
        self._cert = builder.sign(self._key, hashes.SHA256())
        self.pair = self._write("ca", self._cert, self._key)

    @property
    def pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def server(self, name: str, *, dns: Sequence[str], ips: Sequence[str]) -> KeyPair:
        """A serving certificate for the given DNS names and IP addresses."""
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        usage = [ExtendedKeyUsageOID.SERVER_AUTH]
        return self._leaf(name, Identity(dns[0] if dns else name), usage, sans)

    def client(self, name: str, identity: Identity) -> KeyPair:
        """A client certificate; the API server reads the user from CN and groups from O."""
        return self._leaf(name, identity, [ExtendedKeyUsageOID.CLIENT_AUTH], [])

    def _leaf(
        self,
        name: str,
        identity: Identity,
        usage: list[x509.ObjectIdentifier],
        sans: list[x509.GeneralName],
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in identity.groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, identity.user))
        builder = _builder(x509.Name(attributes), self._cert.subject, key.public_key())
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return self._write(name, builder.sign(self._key, hashes.SHA256()), key)

    def _write(self, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_private_pem(key))
        pair.key.chmod(0o600)
        return pair


def signing_key(folder: Path, name: str) -> KeyPair:
    """A bare key pair (``.key`` private, ``.pub`` public), e.g. for service-account tokens."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pair = KeyPair(folder / f"{name}.pub", folder / f"{name}.key")
    pair.cert.write_bytes(public)
    pair.key.write_bytes(_private_pem(key))
    pair.key.chmod(0o600)
    return pair


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # Backdated a little: a component whose clock reads a moment earlier still accepts it.
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _ca_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
