"""A throw-away PKI for TLS tests: a CA, the scaler's server certificate and KEDA's client
certificate, as the two Secrets a TLS install of the chart references (PEM bytes).
Used by tests/test_chart.py and cluster/e2e.py."""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID as EKU
from cryptography.x509.oid import NameOID


def make_pki(server_host: str) -> dict[str, dict[str, bytes]]:
    """The two Secrets a TLS install references: the scaler's (server cert for the host
    KEDA dials + the CA that signs KEDA's client cert) and KEDA's (CA + client cert)."""
    now = datetime.datetime.now(datetime.UTC)

    def cert(
        cn: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[Any, Any] | None, **kw: Any
    ) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        sign_key, issuer_name = issuer if issuer else (key, name)
        b = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
        )
        if "san" in kw:
            try:  # an IP address (e.g. 127.0.0.1: KEDA dialing a local scaler) or a DNS name
                alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(kw["san"]))
            except ValueError:
                alt = x509.DNSName(kw["san"])
            b = b.add_extension(x509.SubjectAlternativeName([alt]), False)
        if "eku" in kw:
            b = b.add_extension(x509.ExtendedKeyUsage([kw["eku"]]), False)
        return b.sign(sign_key, hashes.SHA256())

    def pem(c: x509.Certificate) -> bytes:
        return c.public_bytes(serialization.Encoding.PEM)

    def key_pem(k: ec.EllipticCurvePrivateKey) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key, srv_key, cli_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = cert("pool-ca", ca_key, None)
    issuer = (ca_key, ca.subject)
    srv = cert("gpu-pool-scaler", srv_key, issuer, san=server_host, eku=EKU.SERVER_AUTH)
    cli = cert("keda-operator", cli_key, issuer, eku=EKU.CLIENT_AUTH)
    return {
        "scaler": {"tls.crt": pem(srv), "tls.key": key_pem(srv_key), "ca.crt": pem(ca)},
        "keda": {"ca.crt": pem(ca), "tls.crt": pem(cli), "tls.key": key_pem(cli_key)},
    }
