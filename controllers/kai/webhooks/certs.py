"""Certificates of the admission server: a private CA and the serving certificate it signs.

Pure functions over PEM bytes (no I/O): :func:`new_ca`, :func:`new_serving`, :func:`plan`.
:mod:`kai.webhooks.cert_manager` keeps the result in a Secret and rotates it.

Rotation without a failure window rests on two rules:

- the API server trusts every CA in the ``caBundle``; a new CA is first *added* to the bundle
  (next to the old one), and a serving certificate signed by it is used only once that bundle
  has been published for ``publish_delay`` seconds;
- the serving certificate is renewed when a third of its validity is left, long before it
  expires, and the new one is signed by a CA the bundle already holds.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertBundle",
    "KeyPair",
    "cert_hosts",
    "load_certs",
    "new_ca",
    "new_serving",
    "not_after",
    "renew_due",
    "signed_by",
    "trusted_bundle",
]

# Clock skew between this process and the API server: certificates start a little in the past.
BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM."""

    cert: bytes
    key: bytes


@dataclass(frozen=True)
class CertBundle:
    """What the Secret holds: the CA that signs, the serving pair, and the trusted CAs."""

    ca: KeyPair
    serving: KeyPair
    trusted: bytes  # PEM of every CA the caBundle must hold (the signing CA and older ones)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def new_ca(common_name: str, validity: dt.timedelta) -> KeyPair:
    """A self-signed CA certificate valid for ``validity`` from now."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = _now() - BACKDATE
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + BACKDATE + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def new_serving(ca: KeyPair, hosts: Sequence[str], validity: dt.timedelta) -> KeyPair:
    """A serving certificate for ``hosts`` (DNS names or IP addresses) signed by ``ca``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key = _key()
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    start = _now() - BACKDATE
    end = min(start + BACKDATE + validity, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def load_certs(pem: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (empty for nothing or garbage)."""
    try:
        return list(x509.load_pem_x509_certificates(pem)) if pem.strip() else []
    except ValueError:
        return []


def not_after(pem: bytes) -> dt.datetime | None:
    certs = load_certs(pem)
    return certs[0].not_valid_after_utc if certs else None


def cert_hosts(pem: bytes) -> set[str]:
    """The DNS names and IP addresses a certificate is valid for."""
    certs = load_certs(pem)
    if not certs:
        return set()
    try:
        san = certs[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    hosts = {str(n) for n in san.get_values_for_type(x509.DNSName)}
    hosts |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return hosts


def renew_due(pem: bytes, now: dt.datetime | None = None, fraction: float = 1 / 3) -> bool:
    """Whether less than ``fraction`` of the validity is left (or the certificate is unreadable)."""
    certs = load_certs(pem)
    if not certs:
        return True
    cert = certs[0]
    now = now or _now()
    total = cert.not_valid_after_utc - cert.not_valid_before_utc
    if total > BACKDATE:
        total -= BACKDATE  # the validity asked for; the start is backdated for clock skew
    return cert.not_valid_after_utc - now < total * fraction


def signed_by(serving: bytes, ca: bytes) -> bool:
    """Whether ``serving`` was issued by the CA certificate ``ca`` (signature checked)."""
    leaf, issuers = load_certs(serving), load_certs(ca)
    if not leaf or not issuers:
        return False
    try:
        leaf[0].verify_directly_issued_by(issuers[0])
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def trusted_bundle(cas: Iterable[bytes], now: dt.datetime | None = None) -> bytes:
    """The PEM bundle of the given CAs that have not expired, deduplicated, newest first."""
    now = now or _now()
    seen: set[bytes] = set()
    found: list[x509.Certificate] = []
    for pem in cas:
        for cert in load_certs(pem):
            der = cert.public_bytes(serialization.Encoding.DER)
            if der in seen or cert.not_valid_after_utc <= now:
                continue
            seen.add(der)
            found.append(cert)
    found.sort(key=lambda c: c.not_valid_before_utc, reverse=True)
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in found)
