"""A throwaway PKI made with `cryptography`: a CA, a server certificate and a client certificate."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass
class Pair:
    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=1)
    )


def ca(cn: str = "plnt-test-ca") -> tuple[Pair, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    cert = _validity(builder).sign(key, hashes.SHA256())
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)), key, cert


def leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    cn: str,
    *,
    server: bool,
    hosts: Sequence[str] = ("localhost", "127.0.0.1"),
) -> Pair:
    """A server (SANs: ``hosts``, names or IP addresses) or client certificate the CA signs."""
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_san(h) for h in hosts]),
            critical=False,
        )
    cert = _validity(builder).sign(ca_key, hashes.SHA256())
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


@dataclasses.dataclass
class PKI:
    ca: Pair
    server: Pair
    client: Pair
    other_ca: Pair
    stranger: Pair  # a client certificate signed by the other CA


def make(directory: pathlib.Path, dns_names: Sequence[str] = ()) -> PKI:
    """Writes tls.crt, tls.key and ca.crt for the server into ``directory`` (Crossplane's layout
    of a function's server certificates). The server certificate names localhost, 127.0.0.1
    and ``dns_names`` (e.g. ``function-x.crossplane-system`` for a ``dns:///`` endpoint)."""
    ca_pair, ca_key, ca_cert = ca()
    other_pair, other_key, other_cert = ca("someone-else")
    pki = PKI(
        ca=ca_pair,
        server=leaf(
            ca_key, ca_cert, "localhost", server=True, hosts=("localhost", "127.0.0.1", *dns_names)
        ),
        client=leaf(ca_key, ca_cert, "crossplane", server=False),
        other_ca=other_pair,
        stranger=leaf(other_key, other_cert, "stranger", server=False),
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(pki.server.cert)
    (directory / "tls.key").write_bytes(pki.server.key)
    (directory / "ca.crt").write_bytes(pki.ca.cert)
    return pki
