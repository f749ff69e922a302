"""Asking the scaler how many Jobs a research class may run: the worker's fail-closed check.

KEDA may start a research Job when the scaler is unreachable from KEDA (stale replica
count, a manual Job, a slow scale-down). Before taking an item the worker asks the scaler
itself, through the same authenticated gRPC API KEDA uses (GetMetrics with
scalerMetadata {researchClass: X}); no clear answer means no slot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.research.model import InputError

DEFAULT_TIMEOUT_S = 5.0


def research_metric_name(research_class: str) -> str:
    # Must equal scaler.grpc_api.metric_name_for("research", name) (a test checks it).
    return f"research-{research_class}"


class SlotCheckError(Exception):
    """The scaler gave no usable answer (unreachable, error status, malformed reply)."""


class SlotChecker(Protocol):
    def slots(self, research_class: str) -> int:
        """Total slots of the class now. Raises SlotCheckError when there is no answer."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ScalerEndpoint:
    address: str  # host:port
    tls: bool = False  # TLS with the system roots unless ca_file is set
    ca_file: str | None = None
    cert_file: str | None = None  # client certificate (mTLS)
    key_file: str | None = None
    server_name: str | None = None  # expected name in the scaler's certificate
    timeout_s: float = DEFAULT_TIMEOUT_S
    pool: str | None = None  # sent as metadata 'pool' when set (the scaler checks it)


def _read(flag: str, path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot read: {e.strerror or e}") from None


def credentials(ep: ScalerEndpoint) -> grpc.ChannelCredentials | None:
    """None = plaintext. Raises InputError on an inconsistent or unreadable set of files."""
    if (ep.cert_file is None) != (ep.key_file is None):
        raise InputError("--scaler-cert and --scaler-key go together (mTLS client identity)")
    if not (ep.tls or ep.ca_file or ep.cert_file):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read("--scaler-ca", ep.ca_file),
        private_key=_read("--scaler-key", ep.key_file),
        certificate_chain=_read("--scaler-cert", ep.cert_file),
    )


def slots_from_reply(reply: pb.GetMetricsResponse, research_class: str) -> int:
    """The class's slot count from a GetMetrics reply (pure). Float wins when > 0, as KEDA
    >= 2.17 reads it; anything else than one finite number >= 0 for our metric is an error."""
    want = research_metric_name(research_class)
    values = [m for m in reply.metricValues if m.metricName == want]
    if len(values) != 1:
        got = sorted(m.metricName for m in reply.metricValues)
        raise SlotCheckError(f"reply has no single metric {want!r} (got {got})")
    m = values[0]
    v = m.metricValueFloat if m.metricValueFloat > 0 else float(m.metricValue)
    if not math.isfinite(v) or v < 0:
        raise SlotCheckError(f"metric {want!r} is {v!r}, not a number >= 0")
    return int(v)


class GrpcSlotChecker:
    """Blocking client (the worker is synchronous). One channel, reused across checks."""

    def __init__(self, endpoint: ScalerEndpoint) -> None:
        self._ep = endpoint
        creds = credentials(endpoint)  # read files now: a bad path is a config error (exit 2)
        opts: list[tuple[str, str | int]] = []
        if endpoint.server_name:
            opts.append(("grpc.ssl_target_name_override", endpoint.server_name))
        self._channel = (
            grpc.secure_channel(endpoint.address, creds, options=opts)
            if creds is not None
            else grpc.insecure_channel(endpoint.address, options=opts)
        )
        self._stub = pb_grpc.ExternalScalerStub(self._channel)

    def slots(self, research_class: str) -> int:
        md = {"researchClass": research_class}
        if self._ep.pool:
            md["pool"] = self._ep.pool
        req = pb.GetMetricsRequest(
            scaledObjectRef=pb.ScaledObjectRef(name="gpu-pool-worker", scalerMetadata=md),
            metricName=research_metric_name(research_class),
        )
        try:
            reply = self._stub.GetMetrics(req, timeout=self._ep.timeout_s)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            details = e.details() if hasattr(e, "details") else str(e)
            name = code.name if code is not None else "ERROR"
            raise SlotCheckError(
                f"scaler {self._ep.address}: {name}: {' '.join(str(details).split())[:200]}"
            ) from None
        return slots_from_reply(reply, research_class)

    def close(self) -> None:
        self._channel.close()
