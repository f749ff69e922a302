"""TLS and mTLS for the KEDA-facing gRPC port, with certificate rotation.

The certificate files come from a Kubernetes Secret volume; cert-manager (or a person)
rotates them in place, and the kubelet swaps the whole directory atomically (symlink
swap). grpc calls our fetcher before every new TLS handshake, so a rotated certificate
is served from the next connection on without a restart; connections already open keep
the certificate they were set up with.

The fetcher costs one stat() per file per new connection (KEDA keeps its channel open,
so that is rare). Only when a file's identity (inode, mtime, size) changes are the files
re-read and checked with the stdlib `ssl` module (PEM parses, the key matches the
certificate, the CA bundle loads). A half-written or mismatched set is not served: the
previous certificate stays, a warning says why, and the next handshake looks again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from scaler.config import ConfigError, TLSConfig

log = logging.getLogger("scaler.serve.tls")

# Called each time changed files are examined: True when the new ones took effect.
ReloadHook = Callable[[bool], None]


@dataclass(frozen=True, slots=True)
class _Material:
    cert: bytes
    key: bytes
    client_ca: bytes | None


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks: a Secret volume's ..data swap changes it
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def load_material(tls: TLSConfig) -> _Material:
    """Read and check the PEM files. Raises ValueError naming the file and the problem."""
    paths = [("certFile", tls.certFile), ("keyFile", tls.keyFile)]
    if tls.clientCAFile:
        paths.append(("clientCAFile", tls.clientCAFile))
    raw: dict[str, bytes] = {}
    for key, path in paths:
        try:
            raw[key] = _read(path)
        except OSError as e:
            raise ValueError(f"server.tls.{key} {path}: cannot read: {e.strerror or e}") from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(tls.certFile, tls.keyFile)
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"server.tls certFile {tls.certFile} / keyFile {tls.keyFile}: not a PEM "
            f"certificate chain with its matching private key ({e})"
        ) from None
    if tls.clientCAFile:
        try:
            ctx.load_verify_locations(cadata=raw["clientCAFile"].decode("ascii"))
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
            raise ValueError(
                f"server.tls.clientCAFile {tls.clientCAFile}: not a PEM CA bundle ({e})"
            ) from None
    # The checks read the paths again: a rotation between our read and theirs would
    # make the pair inconsistent, so only accept what is still on disk now.
    for key, path in paths:
        try:
            again = _read(path)
        except OSError as e:
            raise ValueError(f"server.tls.{key} {path}: cannot read: {e.strerror or e}") from None
        if again != raw[key]:
            raise ValueError(f"server.tls.{key} {path}: changed while being read (rotation)")
    return _Material(raw["certFile"], raw["keyFile"], raw.get("clientCAFile"))


def _configuration(m: _Material) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(m.key, m.cert)], m.client_ca)


class CertificateReloader:
    """The fetcher grpc calls before each handshake: a new configuration or None (keep)."""

    def __init__(self, tls: TLSConfig, on_reload: ReloadHook | None = None) -> None:
        self._tls = tls
        self._paths = [p for p in (tls.certFile, tls.keyFile, tls.clientCAFile) if p]
        self._on_reload = on_reload
        self._lock = threading.Lock()  # grpc may call from several core threads
        self._stamps = [_stamp(p) for p in self._paths]
        try:
            self.material = load_material(tls)
        except ValueError as e:
            raise ConfigError(tls.certFile, [str(e)]) from None
        self.initial = _configuration(self.material)
        self.reloads = 0

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            stamps = [_stamp(p) for p in self._paths]
            if stamps == self._stamps:
                return None
            self._stamps = stamps
            try:
                new = load_material(self._tls)
            except ValueError as e:
                # Keep serving the old certificate. The stamps are kept too, so this is
                # logged once; the next write (rest of the rotation) changes them again.
                log.warning("TLS files changed but cannot be used; keeping the old ones: %s", e)
                if self._on_reload is not None:
                    self._on_reload(False)
                return None
            if new == self.material:
                return None  # touched, same content
            self.material = new
            self.reloads += 1
            log.info("TLS certificate reloaded from %s", self._tls.certFile)
            if self._on_reload is not None:
                self._on_reload(True)
            return _configuration(new)


def server_credentials(
    tls: TLSConfig, on_reload: ReloadHook | None = None
) -> grpc.ServerCredentials:
    """Credentials for `add_secure_port`: TLS, plus mTLS when `clientCAFile` is set.

    With a client CA, every client must present a certificate signed by it (KEDA: the
    TriggerAuthentication's tlsClientCert/tlsClientKey). Raises ConfigError when the
    files are missing or invalid at startup (the command exits 2 naming the file).
    """
    reloader = CertificateReloader(tls, on_reload)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial,
        reloader,  # type: ignore[arg-type]  # the stubs omit the documented None (no change)
        require_client_authentication=tls.clientCAFile is not None,
    )
