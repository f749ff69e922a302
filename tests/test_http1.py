"""LeanHTTP1Transport against scripted raw HTTP servers on 127.0.0.1:0 (byte-exact replies)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from scaler.core.load import ScrapeJob
from scaler.ingest.http1 import LeanHTTP1Transport
from scaler.ingest.scrape import PerTargetTransport, Scraper
from tests.support.paths import FIXTURES

REAL = (FIXTURES / "metrics_after_load.txt").read_bytes()


class RawServer:
    """Answers each request with `reply(n)` (n = request number); counts connections.

    `close_after`: close the connection after each reply (without saying so)."""

    def __init__(self, reply: Callable[[int], bytes], close_after: bool = False) -> None:
        self.reply = reply
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                w.write(self.reply(len(self.requests)))
                await w.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def raw() -> AsyncIterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def make(reply: Callable[[int], bytes], close_after: bool = False) -> RawServer:
        s = RawServer(reply, close_after)
        servers.append(s)
        return s

    yield make
    for s in servers:
        if s.server is not None:
            s.server.close()


def ok(body: bytes = REAL, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra) + body


def chunked(body: bytes, size: int = 1000) -> bytes:
    parts = [
        b"%x;ext=1\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    ]
    return (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(parts)
        + b"0\r\nX-Trailer: t\r\n\r\n"
    )


def client() -> httpx.AsyncClient:
    fallback = httpx.AsyncHTTPTransport()
    return httpx.AsyncClient(transport=LeanHTTP1Transport(fallback), timeout=2)


@pytest.mark.parametrize(
    ("reply", "close_after", "connections"),
    [
        pytest.param(lambda n: ok(), False, 1, id="content-length-keep-alive"),
        pytest.param(lambda n: chunked(REAL), False, 1, id="chunked-keep-alive"),
        pytest.param(
            lambda n: b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + REAL,
            True,
            3,
            id="read-to-close",
        ),
        pytest.param(
            lambda n: b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(REAL) + REAL,
            True,
            3,
            id="http-1.0-closes",
        ),
        pytest.param(lambda n: ok(), True, 3, id="server-drops-idle-keep-alive-retried"),
        pytest.param(
            lambda n: ok(gzip.compress(REAL), b"Content-Encoding: gzip\r\n"),
            False,
            1,
            id="gzip-decoded-by-httpx",
        ),
    ],
)
async def test_bodies_and_connection_reuse(
    raw: Callable[..., RawServer],
    reply: Callable[[int], bytes],
    close_after: bool,
    connections: int,
) -> None:
    server = raw(reply, close_after)
    address = await server.start()
    async with client() as c:
        for _ in range(3):
            r = await c.get(f"http://{address}/metrics?x=1")
            assert r.status_code == 200 and r.content == REAL
    assert server.connections == connections
    assert server.requests[0].startswith(b"GET /metrics?x=1 HTTP/1.1\r\n")
    assert b"\r\nhost: " + address.encode() in server.requests[0].lower()


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        pytest.param(
            lambda n: b"SSH-2.0-OpenSSH\r\n\r\n", httpx.RemoteProtocolError, id="not-http"
        ),
        pytest.param(
            lambda n: b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            httpx.RemoteProtocolError,
            id="bad-header",
        ),
        pytest.param(
            lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nshort",
            httpx.RemoteProtocolError,
            id="truncated-body",
        ),
        pytest.param(
            lambda n: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            httpx.RemoteProtocolError,
            id="bad-chunk-size",
        ),
        pytest.param(
            lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
            httpx.RemoteProtocolError,
            id="bad-content-length",
        ),
        pytest.param(
            lambda n: b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
            httpx.RemoteProtocolError,
            id="huge-headers",
        ),
        pytest.param(lambda n: b"", httpx.RemoteProtocolError, id="closed-without-reply"),
    ],
)
async def test_protocol_errors(
    raw: Callable[..., RawServer], reply: Callable[[int], bytes], error: type[Exception]
) -> None:
    address = await raw(reply, True).start()
    async with client() as c:
        with pytest.raises(error):
            r = await c.get(f"http://{address}/metrics")
            await r.aread()


async def test_dead_port_is_connect_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with client() as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"http://127.0.0.1:{port}/metrics")


async def test_silent_server_hits_read_timeout() -> None:
    async def never(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(10)

    silent = await asyncio.start_server(never, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    fallback = httpx.AsyncHTTPTransport()
    async with httpx.AsyncClient(
        transport=LeanHTTP1Transport(fallback), timeout=httpx.Timeout(0.3)
    ) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get(f"http://127.0.0.1:{port}/metrics")
    silent.close()


async def test_cancelled_scrape_does_not_reuse_a_half_read_connection(
    raw: Callable[..., RawServer],
) -> None:
    """A deadline that fires mid-body must close that connection, not pool it."""

    async def slow_body(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(REAL) + REAL[:100])
        await w.drain()
        await asyncio.sleep(5)
        w.close()

    server = await asyncio.start_server(slow_body, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    transport = LeanHTTP1Transport(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=transport) as c:
        (res,) = await Scraper(c, timeout_s=0.3).scrape_all([ScrapeJob(address)])
        assert res.outcome == "timeout"
        assert len(transport) == 0
    server.close()


async def test_non_get_and_https_use_the_fallback() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.scheme}")
        return httpx.Response(200, content=b"ok")

    transport = LeanHTTP1Transport(httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as c:
        await c.post("http://127.0.0.1:1/x", content=b"body")
        await c.get("https://127.0.0.1:1/metrics")
    assert seen == ["POST http", "GET https"]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda clock: LeanHTTP1Transport(
                httpx.AsyncHTTPTransport(), idle_evict_s=60, clock=clock
            ),
            id="plain-http-connections",
        ),
        # https targets' per-target pools (plain http here: the bookkeeping is the same)
        pytest.param(
            lambda clock: PerTargetTransport(idle_evict_s=60, clock=clock),
            id="per-target-pools",
        ),
    ],
)
async def test_idle_connections_of_vanished_targets_are_closed(
    raw: Callable[..., RawServer], make: Callable[[Callable[[], float]], Any]
) -> None:
    now = [0.0]
    a, b = raw(lambda n: ok()), raw(lambda n: ok())
    addr_a, addr_b = await a.start(), await b.start()
    transport = make(lambda: now[0])
    async with httpx.AsyncClient(transport=transport) as c:
        await c.get(f"http://{addr_a}/metrics")
        await c.get(f"http://{addr_b}/metrics")
        assert len(transport) == 2
        now[0] = 60.0
        await c.get(f"http://{addr_a}/metrics")
        assert len(transport) == 2  # b idle exactly 60 s: not yet
        now[0] = 121.0
        await c.get(f"http://{addr_a}/metrics")
        assert len(transport) == 1  # b's idle connection was closed
