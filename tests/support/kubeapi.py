"""A fake Kubernetes API server for tests: a real HTTP/1.1 server on 127.0.0.1:0.

It speaks the API's JSON for what controllers use: list, get and watch, so the *official*
`kubernetes` client (and anything else speaking HTTP) can be pointed at it unchanged.

    with FakeKubeAPI() as api:                      # serves nodes, pods, endpointslices
        api.put("nodes", make_node("gpu-1", gpus=8))            # ADDED (or MODIFIED)
        core = kubernetes.client.CoreV1Api(api.client())        # ApiClient with host=api.url
        ...
        api.delete("nodes", "gpu-1")                            # DELETED

Resources (generic over paths; add more with `api.register(Resource(...))`):
    nodes           /api/v1/nodes                                  cluster-scoped
    pods            /api/v1/pods, /api/v1/namespaces/{ns}/pods     namespaced
    endpointslices  /apis/discovery.k8s.io/v1/endpointslices,
                    /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices
    configmaps, secrets  /api/v1/namespaces/{ns}/...            namespaced
    plus GET of one object: .../{plural}/{name}

Writes: POST to a collection creates (409 AlreadyExists when taken), PUT to an object
replaces it (404 when absent; 409 Conflict on a stale metadata.resourceVersion), as the real
server; `api.requests` records them with their method.

Requests:
    list   → {"kind": "<Kind>List", "apiVersion", "metadata": {"resourceVersion"}, "items"}
             items carry no kind/apiVersion (as the real server); `limit` + `continue`
             paginate over a snapshot; `labelSelector` (=, ==, !=, in, notin, key, !key) and
             `fieldSelector` (dotted paths, =, ==, !=; a missing field reads as "") filter.
    watch  → `?watch=true` (or 1): a chunked stream of JSON lines {"type", "object"} with
             type ADDED | MODIFIED | DELETED | BOOKMARK | ERROR. Without resourceVersion
             (or "0") it starts with ADDED for every current object; with one, it replays
             the history after it. Selectors apply with the real server's transition rules
             (an object modified out of the selector arrives as DELETED, into it as ADDED).
             `timeoutSeconds` ends the stream; `allowWatchBookmarks=true` lets `bookmark()`
             reach it. A resourceVersion older than the last `expire()` gets one ERROR event
             with a Status of code 410 (reason "Expired"), like a compacted etcd.
    errors → Status objects {"kind": "Status", "status": "Failure", "code", "reason", ...}.

Control (thread-safe, from the test):
    api.url, api.port, api.client() -> kubernetes.client.ApiClient
    api.put(resource, obj) -> stored obj; api.delete(resource, name, namespace=None)
    api.get(resource, name, namespace=None) -> obj | None; api.objects(resource) -> list
    api.resource_version -> int (global, bumped by every put/delete, like etcd's revision)
    api.expire()        every resourceVersion handed out so far becomes too old: open
                        watches get ERROR 410 and end; watching from them again gets 410
    api.close_watches() end open watch streams cleanly (as if timeoutSeconds elapsed)
    api.bookmark()      send BOOKMARK (current resourceVersion) to watches that allow it
    api.fail(status=503, count=None, resources=None)  answer the next `count` requests
                        (None: all, until heal()) of those resources with an error Status
    api.heal()
    api.requests        [Request(method, path, resource, watch, query)] received so far
    api.open_watches(resource=None) -> int
    api.wait_for(predicate, timeout=10.0) -> None (polls; raises AssertionError on timeout)
Builders for objects in the real JSON shape: make_node, make_pod, make_endpoint_slice,
make_secret.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    plural: str  # "nodes"
    kind: str  # "Node"
    api_version: str  # "v1", "discovery.k8s.io/v1"
    namespaced: bool

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


DEFAULT_RESOURCES = (
    Resource("nodes", "Node", "v1", namespaced=False),
    Resource("pods", "Pod", "v1", namespaced=True),
    Resource("endpointslices", "EndpointSlice", "discovery.k8s.io/v1", namespaced=True),
    Resource("configmaps", "ConfigMap", "v1", namespaced=True),
    Resource("secrets", "Secret", "v1", namespaced=True),
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    resource: str | None  # plural, None for unknown paths
    watch: bool
    query: Mapping[str, str]


@dataclass
class _Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    old: Obj | None
    new: Obj


@dataclass
class _Store:
    resource: Resource
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)
    history: list[_Event] = field(default_factory=list)


# --- selectors (independent of scaler.ingest.capacity on purpose: a fake must not share the
#     code under test) ------------------------------------------------------------------


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_matcher(selector: str) -> Callable[[Mapping[str, str]], bool]:
    reqs: list[tuple[str, str, frozenset[str]]] = []  # (key, op, values)
    for part in _split_top(selector):
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", part):
            reqs.append((m[1], m[2], frozenset(v.strip() for v in m[3].split(","))))
        elif m := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", part):
            reqs.append((m[1], "notin" if m[2] == "!=" else "in", frozenset({m[3]})))
        elif re.fullmatch(r"![^=!\s]+", part):
            reqs.append((part[1:], "absent", frozenset()))
        elif re.fullmatch(r"[^=!\s(),]+", part):
            reqs.append((part, "exists", frozenset()))
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")

    def one(labels: Mapping[str, str], key: str, op: str, vals: frozenset[str]) -> bool:
        if op == "exists":
            return key in labels
        if op == "absent":
            return key not in labels
        if op == "in":
            return key in labels and labels[key] in vals
        return labels.get(key) not in vals  # notin / !=: a missing key matches

    return lambda labels: all(one(labels, k, op, v) for k, op, v in reqs)


def _field(obj: Obj, path: str) -> str:
    cur: Any = obj
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return ""
        cur = cur[p]
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def field_matcher(selector: str) -> Callable[[Obj], bool]:
    reqs: list[tuple[str, bool, str]] = []
    for part in _split_top(selector):
        m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise ValueError(f"invalid field selector requirement: {part!r}")
        reqs.append((m[1], m[2] != "!=", m[3]))
    return lambda obj: all((_field(obj, p) == v) == eq for p, eq, v in reqs)


# --- the server -------------------------------------------------------------------------


class _Gone(Exception):
    pass


class FakeKubeAPI:
    def __init__(self, resources: tuple[Resource, ...] = DEFAULT_RESOURCES) -> None:
        self._resources: dict[str, _Store] = {}
        self._cond = threading.Condition()
        self._rv = 1
        self._compacted_below = 0  # watching from rv < this → 410
        self._close_gen = 0  # bumped by close_watches()/expire(): open watches end
        self._expire_gen = 0
        self._bookmark_gen = 0
        self._stopping = False
        self._fail: tuple[int, int | None, frozenset[str] | None] | None = None
        self._pages: dict[str, list[Obj]] = {}
        self._open_watches: dict[str, int] = {}
        self.requests: list[Request] = []
        for r in resources:
            self.register(r)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ----------------------------------------------------------------------
    def register(self, resource: Resource) -> None:
        with self._cond:
            self._resources[resource.plural] = _Store(resource)

    def start(self) -> FakeKubeAPI:
        api = self

        class Handler(_Handler):
            fake = api

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-api"
        )
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() first"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> kubernetes.client.ApiClient:
        conf = kubernetes.client.Configuration(host=self.url)
        return kubernetes.client.ApiClient(conf)

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig whose current context is this server (what `KUBECONFIG=` reads)."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    # objects ------------------------------------------------------------------------
    def _store(self, resource: str) -> _Store:
        try:
            return self._resources[resource]
        except KeyError:
            raise KeyError(f"resource {resource!r} not registered") from None

    def put(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Create or replace (by namespace/name); returns the stored copy with its new rv."""
        with self._cond:
            st = self._store(resource)
            new = copy.deepcopy(dict(obj))
            meta = new.setdefault("metadata", {})
            if st.resource.namespaced:
                meta.setdefault("namespace", "default")
            else:
                meta.pop("namespace", None)
            key = (meta.get("namespace", ""), meta["name"])
            old = st.objects.get(key)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            meta.setdefault("uid", old["metadata"]["uid"] if old else f"uid-{self._rv}")
            new.pop("kind", None)
            new.pop("apiVersion", None)
            st.objects[key] = new
            st.history.append(_Event(self._rv, "MODIFIED" if old else "ADDED", old, new))
            self._cond.notify_all()
            return copy.deepcopy(new)

    def delete(self, resource: str, name: str, namespace: str | None = None) -> None:
        with self._cond:
            st = self._store(resource)
            key = ((namespace or "default") if st.resource.namespaced else "", name)
            old = st.objects.pop(key)
            self._rv += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            st.history.append(_Event(self._rv, "DELETED", old, gone))
            self._cond.notify_all()

    def get(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        with self._cond:
            st = self._store(resource)
            key = ((namespace or "default") if st.resource.namespaced else "", name)
            o = st.objects.get(key)
            return copy.deepcopy(o) if o is not None else None

    def objects(self, resource: str) -> list[Obj]:
        with self._cond:
            return [copy.deepcopy(o) for o in self._store(resource).objects.values()]

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    # faults and stream control --------------------------------------------------------
    def expire(self) -> None:
        with self._cond:
            self._compacted_below = self._rv + 1
            for st in self._resources.values():
                st.history.clear()
            self._expire_gen += 1
            self._cond.notify_all()

    def close_watches(self) -> None:
        with self._cond:
            self._close_gen += 1
            self._cond.notify_all()

    def bookmark(self) -> None:
        with self._cond:
            self._bookmark_gen += 1
            self._cond.notify_all()

    def fail(
        self, status: int = 503, count: int | None = None, resources: tuple[str, ...] | None = None
    ) -> None:
        with self._cond:
            self._fail = (status, count, frozenset(resources) if resources else None)

    def heal(self) -> None:
        with self._cond:
            self._fail = None

    def open_watches(self, resource: str | None = None) -> int:
        with self._cond:
            if resource is None:
                return sum(self._open_watches.values())
            return self._open_watches.get(resource, 0)

    def list_requests(self, resource: str) -> int:
        with self._cond:
            return sum(1 for r in self.requests if r.resource == resource and not r.watch)

    @staticmethod
    def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.01)
        raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")

    # request handling (called from handler threads) ------------------------------------
    def _take_failure(self, resource: str) -> int | None:
        with self._cond:
            if self._fail is None:
                return None
            status, count, only = self._fail
            if only is not None and resource not in only:
                return None
            if count is not None:
                self._fail = (status, count - 1, only) if count > 1 else None
            return status

    def _route(self, path: str) -> tuple[_Store, str | None, str | None] | None:
        """(store, namespace or None for all, name or None for a list)."""
        for st in self._resources.values():
            r = st.resource
            p = r.prefix
            m = re.fullmatch(re.escape(p) + rf"/{r.plural}(?:/([^/]+))?", path)
            if m:
                if m[1] and r.namespaced:
                    return None  # namespaced object needs its namespace
                return st, None, m[1]
            if r.namespaced:
                m = re.fullmatch(
                    re.escape(p) + rf"/namespaces/([^/]+)/{r.plural}(?:/([^/]+))?", path
                )
                if m:
                    return st, m[1], m[2]
        return None

    def _wire(self, st: _Store, obj: Obj) -> Obj:
        out = {"kind": st.resource.kind, "apiVersion": st.resource.api_version}
        out.update(copy.deepcopy(obj))
        return out

    def _list(
        self,
        st: _Store,
        ns: str | None,
        match: Callable[[Obj | None], bool],
        query: Mapping[str, str],
    ) -> Obj:
        with self._cond:
            token = query.get("continue")
            if token:
                snap = self._pages.get(token)
                if snap is None:
                    raise _Gone("continue token expired")
                items, rv = snap[0]["items"], snap[0]["rv"]
            else:
                items = [
                    copy.deepcopy(o)
                    for k, o in sorted(st.objects.items())
                    if (ns is None or k[0] == ns) and match(o)
                ]
                rv = self._rv
            limit = int(query.get("limit") or 0)
            meta: Obj = {"resourceVersion": str(rv)}
            if limit and len(items) > limit:
                page, rest = items[:limit], items[limit:]
                nxt = base64.urlsafe_b64encode(f"{rv}:{len(self._pages)}".encode()).decode()
                self._pages[nxt] = [{"items": rest, "rv": rv}]
                meta["continue"] = nxt
                meta["remainingItemCount"] = len(rest)
                items = page
            return {
                "kind": f"{st.resource.kind}List",
                "apiVersion": st.resource.api_version,
                "metadata": meta,
                "items": items,
            }

    def _watch(
        self,
        st: _Store,
        ns: str | None,
        match: Callable[[Obj | None], bool],
        query: Mapping[str, str],
        alive: Callable[[], bool],
        gens: tuple[int, int],
    ) -> Iterator[Obj]:
        """Events for one watch request, until timeout/close/expire/stop or client gone.

        `gens` = (close, expire) generations when the request arrived: a close_watches() or
        expire() after that ends this watch even if it raced with the stream's start."""
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        rv_param = query.get("resourceVersion") or "0"
        kind = st.resource.kind

        def in_ns(o: Obj | None) -> bool:
            return o is not None and (ns is None or o["metadata"].get("namespace") == ns)

        def sel(o: Obj | None) -> bool:
            return in_ns(o) and match(o)

        with self._cond:
            (close_gen, expire_gen), bm_gen = gens, self._bookmark_gen
            pending: list[Obj] = []
            if rv_param == "0":
                since = self._rv
                pending = [
                    {"type": "ADDED", "object": self._wire(st, o)}
                    for _, o in sorted(st.objects.items())
                    if sel(o)
                ]
            else:
                since = int(rv_param)
                if since < self._compacted_below:
                    yield _expired(since)
                    return
        while True:
            with self._cond:
                for ev in st.history:
                    if ev.rv <= since:
                        continue
                    since = ev.rv
                    was, now = sel(ev.old), sel(ev.new)
                    typ: str | None = None
                    if ev.type == "DELETED":
                        typ = "DELETED" if was else None
                    elif was and now:
                        typ = "MODIFIED"
                    elif was:
                        typ = "DELETED"
                    elif now:
                        typ = "ADDED"
                    if typ:
                        pending.append({"type": typ, "object": self._wire(st, ev.new)})
                if bookmarks and self._bookmark_gen != bm_gen:
                    bm_gen = self._bookmark_gen
                    pending.append(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": kind,
                                "apiVersion": st.resource.api_version,
                                "metadata": {"resourceVersion": str(self._rv)},
                            },
                        }
                    )
                ended = self._stopping or self._close_gen != close_gen
                expired = self._expire_gen != expire_gen
            if expired:  # compacted under this watch: only a re-list can catch up
                yield _expired(since)
                return
            yield from pending
            pending = []
            if ended or time.monotonic() >= deadline or not alive():
                return
            with self._cond:
                self._cond.wait(0.05)


def _expired(rv: int) -> Obj:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {rv}",
            "reason": "Expired",
            "code": 410,
        },
    }


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "AlreadyExists",
    410: "Expired",
}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKubeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read api.requests instead

    def _send_json(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str) -> None:
        reason = _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
        self._send_json(code, _status(code, reason, message))

    def _client_alive(self) -> bool:
        """False once the client closed its side (Watch.stop() shuts the socket down)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return True
            return self.connection.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def _servable(self, route: tuple[_Store, str | None, str | None] | None, path: str) -> bool:
        """False after answering 404 (unknown path) or an injected failure; reads and
        writes share this."""
        if route is None:
            self._error(404, f"the server could not find the requested resource ({path})")
            return False
        failure = self.fake._take_failure(route[0].resource.plural)
        if failure is not None:
            self._error(failure, f"injected failure {failure}")
            return False
        return True

    def do_GET(self) -> None:
        fake = self.fake
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        watch = query.get("watch") in ("true", "1")
        route = fake._route(url.path)
        with fake._cond:
            fake.requests.append(
                Request("GET", url.path, route[0].resource.plural if route else None, watch, query)
            )
            gens = (fake._close_gen, fake._expire_gen)
        if not self._servable(route, url.path):
            return
        assert route is not None
        st, ns, name = route
        try:
            lab = label_matcher(query.get("labelSelector", ""))
            fld = field_matcher(query.get("fieldSelector", ""))
        except ValueError as e:
            self._error(400, str(e))
            return

        def match(o: Obj | None) -> bool:
            return o is not None and lab(o["metadata"].get("labels") or {}) and fld(o)

        if name is not None:
            obj = fake.get(st.resource.plural, name, ns)
            if obj is None:
                self._error(404, f'{st.resource.plural} "{name}" not found')
            else:
                self._send_json(200, fake._wire(st, obj))
            return
        if not watch:
            try:
                self._send_json(200, fake._list(st, ns, match, query))
            except _Gone as e:
                self._error(410, str(e))
            return

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        plural = st.resource.plural
        with fake._cond:
            fake._open_watches[plural] = fake._open_watches.get(plural, 0) + 1
        try:
            for event in fake._watch(st, ns, match, query, self._client_alive, gens):
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # client went away mid-stream
        finally:
            with fake._cond:
                fake._open_watches[plural] -= 1

    def _write(self, method: str) -> None:
        fake = self.fake
        url = urlsplit(self.path)
        route = fake._route(url.path)
        with fake._cond:
            fake.requests.append(
                Request(method, url.path, route[0].resource.plural if route else None, False, {})
            )
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as e:
            self._error(400, f"body is not JSON: {e}")
            return
        if not self._servable(route, url.path):
            return
        assert route is not None
        st, ns, name = route
        meta = body.get("metadata") or {}
        if st.resource.namespaced:
            meta["namespace"] = ns or meta.get("namespace") or "default"
        plural = st.resource.plural
        with fake._cond:  # check and write atomically, as etcd's transaction does
            if method == "POST":
                if name is not None:
                    self._error(405, "POST goes to the collection")
                    return
                if fake.get(plural, meta.get("name", ""), ns) is not None:
                    self._error(409, f'{plural} "{meta.get("name")}" already exists')
                    return
            else:
                old = fake.get(plural, name or "", ns)
                if old is None:
                    self._error(404, f'{plural} "{name}" not found')
                    return
                want = meta.get("resourceVersion")
                if want and want != old["metadata"]["resourceVersion"]:
                    self._error(409, f'{plural} "{name}": the object has been modified')
                    return
                meta.pop("resourceVersion", None)
            body["metadata"] = meta
            stored = fake.put(plural, body)
        self._send_json(201 if method == "POST" else 200, fake._wire(st, stored))

    def do_POST(self) -> None:
        self._write("POST")

    def do_PUT(self) -> None:
        self._write("PUT")


# --- builders for objects in the real JSON shape ----------------------------------------


def make_node(
    name: str,
    *,
    gpus: int | str | None = 8,
    resource: str = "nvidia.com/gpu",
    ready: bool | str = True,
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    taints: list[Obj] | None = None,
) -> Obj:
    """A Node as the API returns it. `ready` may be "Unknown"; gpus None = no such resource."""
    allocatable: Obj = {"cpu": "96", "memory": "1056Gi", "pods": "110"}
    if gpus is not None:
        allocatable[resource] = str(gpus)
    status = ready if isinstance(ready, str) else ("True" if ready else "False")
    spec: Obj = {"podCIDR": "10.244.1.0/24"}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {
            "name": name,
            "labels": dict(labels) if labels is not None else {"gpu-pool": "shared"},
        },
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                },
                {"type": "Ready", "status": status, "reason": "KubeletReady"},
            ],
        },
    }


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = None,
    gpus: int | str | None = None,
    resource: str = "nvidia.com/gpu",
    labels: Mapping[str, str] | None = None,
    phase: str = "Running",
    ip: str | None = None,
    ready: bool = True,
    limits_only: bool = False,
    init_gpus: int | None = None,
    port: int = 8000,
) -> Obj:
    """A Pod as the API returns it (requests on one container; optional init container)."""
    res: Obj = {}
    if gpus is not None:
        res = {"limits": {resource: str(gpus)}}
        if not limits_only:
            res["requests"] = {resource: str(gpus)}
    spec: Obj = {
        "containers": [
            {
                "name": "main",
                "image": "vllm/vllm-openai:v0.32.0",
                "resources": res,
                "ports": [{"containerPort": port, "protocol": "TCP"}],
            }
        ]
    }
    if init_gpus is not None:
        spec["initContainers"] = [
            {
                "name": "warmup",
                "image": "busybox",
                "resources": {
                    "requests": {resource: str(init_gpus)},
                    "limits": {resource: str(init_gpus)},
                },
            }
        ]
    if node is not None:
        spec["nodeName"] = node
    status: Obj = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip is not None:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
        "status": status,
    }


def make_endpoint_slice(
    name: str,
    *,
    service: str,
    namespace: str = "default",
    endpoints: Sequence[tuple[str, bool]] = (),
    port: int = 8000,
    port_name: str = "http",
) -> Obj:
    """An EndpointSlice (discovery.k8s.io/v1) of `service`: endpoints = [(ip, ready)]."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": rdy, "serving": rdy, "terminating": False}}
            for ip, rdy in endpoints
        ],
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
    }


def make_secret(namespace: str, name: str, data: Mapping[str, bytes]) -> Obj:
    """A Secret as the API returns it: `data` values base64-encoded."""
    return {
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
