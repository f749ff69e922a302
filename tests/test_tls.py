"""TLS and mTLS on the KEDA-facing gRPC port, with certificates generated here.

A real grpc.aio server with `scaler.serve.tls.server_credentials` on 127.0.0.1 and real TLS
clients: what is refused, what is accepted, and that a rotated certificate on disk is
served to the next connection without a restart.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.app import Options, Scaler
from scaler.config import ConfigError, TLSConfig, load_config
from scaler.serve.grpc_api import ExternalScalerServicer
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots
from scaler.serve.tls import server_credentials
from tests.support.decisions import decision, svc
from tests.support.exposition import ExpositionServer
from tests.support.paths import FIXTURES
from tests.support.scaler import write_config


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str) -> tuple[Pem, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _pem(cert, key), key, cert


def make_leaf(
    cn: str, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, *, server: bool
) -> Pem:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return _pem(builder.sign(ca_key, hashes.SHA256()), key)


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    return Pem(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


@dataclass
class PKI:
    """Two unrelated CAs, each with a server and a client certificate."""

    ca1: Pem
    server1: Pem
    client1: Pem
    ca2: Pem
    server2: Pem
    client2: Pem


@pytest.fixture(scope="module")
def pki() -> PKI:
    ca1, k1, c1 = make_ca("pool-ca-1")
    ca2, k2, c2 = make_ca("pool-ca-2")
    return PKI(
        ca1,
        make_leaf("gpu-pool-scaler", k1, c1, server=True),
        make_leaf("keda-operator", k1, c1, server=False),
        ca2,
        make_leaf("gpu-pool-scaler", k2, c2, server=True),
        make_leaf("keda-operator", k2, c2, server=False),
    )


def write_server_files(d: Path, server: Pem, client_ca: Pem | None) -> TLSConfig:
    (d / "tls.crt").write_bytes(server.cert)
    (d / "tls.key").write_bytes(server.key)
    if client_ca is not None:
        (d / "ca.crt").write_bytes(client_ca.cert)
    return TLSConfig(
        certFile=str(d / "tls.crt"),
        keyFile=str(d / "tls.key"),
        clientCAFile=str(d / "ca.crt") if client_ca is not None else None,
    )


class TLSServer:
    def __init__(self, tls: TLSConfig) -> None:
        self.snapshots = Snapshots()
        self.metrics = ScalerMetrics(CollectorRegistry())
        self.reload_results: list[bool] = []  # True: the new files took effect
        self.server = grpc.aio.server()
        pb_grpc.add_ExternalScalerServicer_to_server(
            ExternalScalerServicer(self.snapshots, self.metrics), self.server
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        creds = server_credentials(tls, self.reload_results.append)
        self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.snapshots.publish(decision(1, svc("chat", 3)))

    async def call_with(
        self, root: Pem | None, client: Pem | None = None, *, plaintext: bool = False
    ) -> int | grpc.StatusCode:
        return await call_with(self.port, root, client, plaintext=plaintext)


async def call_with(
    port: int, root: Pem | None, client: Pem | None = None, *, plaintext: bool = False
) -> int | grpc.StatusCode:
    """One KEDA GetMetrics over a new connection: the value, or the status code."""
    # A private subchannel pool: a new channel must make a new TLS handshake.
    opts = [("grpc.use_local_subchannel_pool", 1)]
    target = f"127.0.0.1:{port}"
    if plaintext:
        channel = grpc.aio.insecure_channel(target, options=opts)
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=root.cert if root else None,
            private_key=client.key if client else None,
            certificate_chain=client.cert if client else None,
        )
        channel = grpc.aio.secure_channel(target, creds, options=opts)
    try:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name="so", namespace="serving", scalerMetadata={"service": "chat"})
        resp = await stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inference-chat"), timeout=5
        )
        return resp.metricValues[0].metricValue
    except grpc.aio.AioRpcError as e:
        return e.code()
    finally:
        await channel.close()


@pytest.fixture
async def serve() -> AsyncIterator[list[TLSServer]]:
    servers: list[TLSServer] = []
    yield servers
    for s in servers:
        await s.server.stop(0)


async def start(servers: list[TLSServer], tls: TLSConfig) -> TLSServer:
    s = TLSServer(tls)
    await s.server.start()
    servers.append(s)
    return s


REFUSED = grpc.StatusCode.UNAVAILABLE  # a failed handshake surfaces as UNAVAILABLE


@pytest.mark.parametrize(
    ("mtls", "client", "expected"),
    [
        pytest.param(False, "plaintext", REFUSED, id="tls-plaintext-client-refused"),
        pytest.param(False, "trusts-ca1", 3, id="tls-client-trusting-server-ca-accepted"),
        pytest.param(False, "trusts-ca2", REFUSED, id="tls-client-trusting-wrong-ca-refused"),
        pytest.param(True, "plaintext", REFUSED, id="mtls-plaintext-client-refused"),
        pytest.param(True, "no-client-cert", REFUSED, id="mtls-client-without-cert-refused"),
        pytest.param(True, "cert-from-ca2", REFUSED, id="mtls-client-cert-from-wrong-ca-refused"),
        pytest.param(True, "cert-from-ca1", 3, id="mtls-valid-client-cert-accepted"),
        pytest.param(True, "cert-ca1-trusts-ca2", REFUSED, id="mtls-client-trusting-wrong-ca"),
    ],
)
async def test_who_gets_in(
    tmp_path: Path,
    pki: PKI,
    serve: list[TLSServer],
    mtls: bool,
    client: str,
    expected: int | grpc.StatusCode,
) -> None:
    s = await start(serve, write_server_files(tmp_path, pki.server1, pki.ca1 if mtls else None))
    outcome = {
        "plaintext": lambda: s.call_with(None, plaintext=True),
        "trusts-ca1": lambda: s.call_with(pki.ca1),
        "trusts-ca2": lambda: s.call_with(pki.ca2),
        "no-client-cert": lambda: s.call_with(pki.ca1),
        "cert-from-ca2": lambda: s.call_with(pki.ca1, pki.client2),
        "cert-from-ca1": lambda: s.call_with(pki.ca1, pki.client1),
        "cert-ca1-trusts-ca2": lambda: s.call_with(pki.ca2, pki.client1),
    }[client]
    assert await outcome() == expected


async def test_rotated_certificate_is_served_to_new_connections(
    tmp_path: Path, pki: PKI, serve: list[TLSServer]
) -> None:
    tls = write_server_files(tmp_path, pki.server1, pki.ca1)
    s = await start(serve, tls)
    assert await s.call_with(pki.ca1, pki.client1) == 3
    assert await s.call_with(pki.ca2, pki.client1) == REFUSED
    # cert-manager rotates to a certificate from CA 2 (the client CA file is unchanged).
    write_server_files(tmp_path, pki.server2, pki.ca1)
    assert await s.call_with(pki.ca2, pki.client1) == 3
    assert await s.call_with(pki.ca1, pki.client1) == REFUSED
    assert s.reload_results == [True]


async def test_rotated_client_ca_is_enforced(
    tmp_path: Path, pki: PKI, serve: list[TLSServer]
) -> None:
    tls = write_server_files(tmp_path, pki.server1, pki.ca1)
    s = await start(serve, tls)
    assert await s.call_with(pki.ca1, pki.client2) == REFUSED
    (tmp_path / "ca.crt").write_bytes(pki.ca2.cert)  # clients now carry CA-2 certificates
    assert await s.call_with(pki.ca1, pki.client2) == 3
    assert await s.call_with(pki.ca1, pki.client1) == REFUSED


async def test_broken_rotation_keeps_the_old_certificate(
    tmp_path: Path, pki: PKI, serve: list[TLSServer], caplog: pytest.LogCaptureFixture
) -> None:
    tls = write_server_files(tmp_path, pki.server1, pki.ca1)
    s = await start(serve, tls)
    # Half a rotation: the new certificate is written, its key is not (key mismatch).
    (tmp_path / "tls.crt").write_bytes(pki.server2.cert)
    assert await s.call_with(pki.ca1, pki.client1) == 3  # still the old pair
    assert await s.call_with(pki.ca1, pki.client1) == 3
    assert s.reload_results == [False]  # examined once, not per handshake
    assert "keeping the old ones" in caplog.text and "tls.crt" in caplog.text
    # The rest of the rotation lands: the new pair is served.
    (tmp_path / "tls.key").write_bytes(pki.server2.key)
    assert await s.call_with(pki.ca2, pki.client1) == 3
    assert s.reload_results == [False, True]


async def test_health_over_tls_for_clients_that_speak_it(
    tmp_path: Path, pki: PKI, serve: list[TLSServer]
) -> None:
    s = await start(serve, write_server_files(tmp_path, pki.server1, pki.ca1))
    await s.health.set("", health_pb2.HealthCheckResponse.SERVING)
    creds = grpc.ssl_channel_credentials(pki.ca1.cert, pki.client1.key, pki.client1.cert)
    async with grpc.aio.secure_channel(f"127.0.0.1:{s.port}", creds) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("breakage", "names"),
    [
        pytest.param(
            "missing-cert",
            r"server.tls.certFile \S+/tls.crt: cannot read: No such file or directory$",
            id="missing-cert-file",
        ),
        pytest.param("garbage-key", "tls.key", id="key-not-pem"),
        pytest.param("mismatched-key", "tls.key", id="key-does-not-match-cert"),
        pytest.param("garbage-ca", "ca.crt", id="client-ca-not-pem"),
    ],
)
def test_bad_files_at_startup_are_a_config_error_naming_the_file(
    tmp_path: Path, pki: PKI, breakage: str, names: str
) -> None:
    tls = write_server_files(tmp_path, pki.server1, pki.ca1)
    if breakage == "missing-cert":
        (tmp_path / "tls.crt").unlink()
    elif breakage == "garbage-key":
        (tmp_path / "tls.key").write_text("not a key\n")
    elif breakage == "mismatched-key":
        (tmp_path / "tls.key").write_bytes(pki.server2.key)
    else:
        (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n")
    with pytest.raises(ConfigError, match=names):
        server_credentials(tls)


async def test_whole_scaler_with_mtls_and_plain_http_probes(
    tmp_path: Path, pki: PKI, exposition_server: Callable[[str], ExpositionServer]
) -> None:
    """`server.tls` in the pool config: KEDA's port is mTLS-only, while kubelet probes
    (which cannot do TLS on gRPC probes) use the plain HTTP /healthz and /readyz on the
    metrics port. A rotation is counted in gpu_pool_scaler_tls_reloads_total."""
    target = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address])
    tls = write_server_files(tmp_path, pki.server1, pki.ca1)
    cfg = yaml.safe_load(path.read_text())
    cfg["server"] = {"tls": tls.model_dump(exclude_none=True)}
    path.write_text(yaml.safe_dump(cfg))
    scaler = Scaler(
        load_config(path),
        Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", drain_seconds=0.1),
    )
    running = await scaler.start()
    try:
        port = running.grpc_port
        assert await call_with(port, None, plaintext=True) == REFUSED
        assert await call_with(port, pki.ca1) == REFUSED  # no client certificate
        assert await call_with(port, pki.ca1, pki.client1) == 1  # idle capture: minReplicas

        def get(p: str) -> int:
            url = f"http://127.0.0.1:{running.metrics_port}{p}"
            with urllib.request.urlopen(url, timeout=5) as r:
                return int(r.status)

        assert await asyncio.to_thread(get, "/healthz") == 200
        assert await asyncio.to_thread(get, "/readyz") == 200

        write_server_files(tmp_path, pki.server2, pki.ca1)
        assert await call_with(port, pki.ca2, pki.client1) == 1
        reg = running.metrics.registry
        assert reg.get_sample_value("gpu_pool_scaler_tls_reloads_total", {"result": "ok"}) == 1
    finally:
        await scaler.shutdown(running)
