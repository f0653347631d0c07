"""A throw-away certificate authority and serving certificate for ``--tls``.

Uses the ``cryptography`` package when installed, else the ``openssl`` command; without either
the server falls back to plain HTTP (the caller decides)."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CertBundle:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


class TLSUnavailable(RuntimeError):
    pass


def make_certificates(hostnames: list[str], ips: list[str]) -> CertBundle:
    try:
        return _with_cryptography(hostnames, ips)
    except ImportError:
        return _with_openssl(hostnames, ips)


def _with_cryptography(hostnames: list[str], ips: list[str]) -> CertBundle:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kai-sim-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
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
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = [x509.DNSName(h) for h in hostnames]
    alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (hostnames or ips)[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return CertBundle(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _with_openssl(hostnames: list[str], ips: list[str]) -> CertBundle:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TLSUnavailable(
            "neither the 'cryptography' package nor the 'openssl' command is "
            "available to make a certificate"
        )
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        san = ",".join([f"DNS:{h}" for h in hostnames] + [f"IP:{i}" for i in ips])

        def run(*args: str) -> None:
            subprocess.run([openssl, *args], check=True, capture_output=True)

        run(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(d / "ca.key"),
            "-out",
            str(d / "ca.crt"),
            "-days",
            "30",
            "-subj",
            "/CN=kai-sim-ca",
        )
        run(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(d / "tls.key"),
            "-out",
            str(d / "tls.csr"),
            "-subj",
            f"/CN={(hostnames or ips)[0]}",
        )
        (d / "ext.cnf").write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
        run(
            "x509",
            "-req",
            "-in",
            str(d / "tls.csr"),
            "-CA",
            str(d / "ca.crt"),
            "-CAkey",
            str(d / "ca.key"),
            "-CAcreateserial",
            "-out",
            str(d / "tls.crt"),
            "-days",
            "30",
            "-extfile",
            str(d / "ext.cnf"),
        )
        return CertBundle(
            (d / "ca.crt").read_bytes(), (d / "tls.crt").read_bytes(), (d / "tls.key").read_bytes()
        )
