"""A real HTTP server answering the one Kubernetes API call the scaler makes for the research
queue's credentials: GET /api/v1/namespaces/{ns}/secrets/{name}."""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes

_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/secrets/([^/?]+)")


class FakeSecretApi:
    """`secrets[(ns, name)]` is served as a Secret (values base64-encoded as the API does);
    `status[(ns, name)]` answers that HTTP status instead (e.g. 403 for a missing Role);
    anything else is 404. `gets` counts the calls per Secret."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}
        self.status: dict[tuple[str, str], int] = {}
        self.gets: dict[tuple[str, str], int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                doc: dict[str, object]
                m = _PATH.match(self.path)
                key = (m.group(1), m.group(2)) if m else ("", "")
                outer.gets[key] = outer.gets.get(key, 0) + 1
                code = outer.status.get(key, 200 if key in outer.secrets else 404)
                if code == 200:
                    data = {k: base64.b64encode(v).decode() for k, v in outer.secrets[key].items()}
                    doc = {
                        "kind": "Secret",
                        "apiVersion": "v1",
                        "metadata": {"name": key[1], "namespace": key[0]},
                        "data": data,
                    }
                else:
                    doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def client(self) -> kubernetes.client.ApiClient:
        conf = kubernetes.client.Configuration(host=f"http://127.0.0.1:{self.httpd.server_port}")
        return kubernetes.client.ApiClient(conf)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def running_secret_api() -> Iterator[FakeSecretApi]:
    api = FakeSecretApi()
    try:
        yield api
    finally:
        api.stop()
