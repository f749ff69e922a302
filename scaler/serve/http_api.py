"""HTTP side port: own Prometheus /metrics, /healthz (liveness), /readyz (readiness).

A stdlib threading server: it must answer even when the asyncio loop is busy or wedged,
which is exactly when liveness matters.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# (ok, detail) providers, evaluated per request.
Probe = Callable[[], tuple[bool, str]]


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6  # "::" also accepts IPv4 on a dual-stack host


class HealthServer:
    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, live: Probe, ready: Probe
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = generate_latest(outer.registry)
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    self._probe(outer.live)
                elif path == "/readyz":
                    self._probe(outer.ready)
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _probe(self, probe: Probe) -> None:
                ok, detail = probe()
                body = json.dumps({"ok": ok, "detail": detail}).encode() + b"\n"
                self._send(200 if ok else 503, body, "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the logs

        self.registry = registry
        self.live = live
        self.ready = ready
        server_cls = _IPv6Server if ":" in host else ThreadingHTTPServer
        self._httpd = server_cls((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
