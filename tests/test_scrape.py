"""Scraper: real loopback HTTP(S) servers and httpx.MockTransport; deadlines, caps, errors."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from scaler.config import ScrapeConfig
from scaler.core.load import ScrapeJob, ScrapeResult
from scaler.ingest.scrape import (
    BearerToken,
    PerTargetTransport,
    Scraper,
    make_client,
)
from tests.support.exposition import ExpositionServer
from tests.support.paths import FIXTURES

REAL = (FIXTURES / "metrics_after_load.txt").read_bytes()
NO_STATS = b"".join(
    line for line in REAL.splitlines(keepends=True) if b"vllm:" not in line
)  # --disable-log-stats


def _cfg(**kw: object) -> ScrapeConfig:
    base: dict[str, object] = {"intervalSeconds": 5, "timeoutSeconds": 0.5}
    return ScrapeConfig.model_validate(base | kw)


def _sleeping(seconds: float, body: bytes = REAL) -> Callable[[], tuple[int, bytes]]:
    def produce() -> tuple[int, bytes]:
        time.sleep(seconds)
        return 200, body

    return produce


def _dead_address() -> str:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    ("produce", "outcome", "error"),
    [
        pytest.param(lambda: (200, REAL), "ok", None, id="real-exposition"),
        pytest.param(lambda: (500, b"oops"), "http_error", "HTTP 500", id="http-500"),
        pytest.param(lambda: (404, b""), "http_error", "HTTP 404", id="http-404"),
        pytest.param(lambda: (200, REAL * 3), "too_large", "larger than", id="oversized-body"),
        pytest.param(
            lambda: (200, b"<html>502 Bad Gateway</html>"), "malformed", "malformed", id="garbage"
        ),
        pytest.param(
            lambda: (200, REAL[: REAL.index(b"vllm:num_requests_waiting{") + 40]),
            "malformed",
            "malformed",
            id="truncated-body",
        ),
        pytest.param(
            lambda: (200, NO_STATS), "no_data", "no engine metrics", id="disable-log-stats"
        ),
        pytest.param(_sleeping(2.0), "timeout", "timeout", id="slow-target"),
    ],
)
async def test_one_target_outcomes(
    exposition_server: Callable[..., ExpositionServer],
    produce: Callable[[], tuple[int, bytes]],
    outcome: str,
    error: str | None,
) -> None:
    server = exposition_server(produce)
    seen: list[ScrapeResult] = []
    cfg = _cfg(maxBodyBytes=100_000)
    async with make_client(cfg) as client:
        scraper = Scraper(
            client, timeout_s=0.5, max_body_bytes=cfg.maxBodyBytes, observe=seen.append
        )
        t0 = time.monotonic()
        (res,) = await scraper.scrape_all([ScrapeJob(server.address)])
        elapsed = time.monotonic() - t0
    assert res.outcome == outcome
    assert seen == [res]
    assert elapsed < 1.0  # never past the deadline
    if error is None:
        assert res.error is None and res.sample is not None and res.body_bytes == len(REAL)
        assert res.sample.generation_tokens_total == 8000.0
    else:
        assert res.error is not None and error in res.error and res.sample is None


async def test_dead_target_is_a_connect_error() -> None:
    async with make_client(_cfg()) as client:
        (res,) = await Scraper(client, timeout_s=0.5).scrape_all([ScrapeJob(_dead_address())])
    assert res.outcome == "connect_error" and res.sample is None and res.error


async def test_slow_and_dead_targets_do_not_delay_the_cycle(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    fast = [exposition_server(lambda: (200, REAL)) for _ in range(3)]
    slow = exposition_server(_sleeping(5.0))
    jobs = [ScrapeJob(s.address) for s in fast] + [
        ScrapeJob(slow.address),
        ScrapeJob(_dead_address()),
    ]
    async with make_client(_cfg()) as client:
        scraper = Scraper(client, timeout_s=0.5)
        t0 = time.monotonic()
        results = await scraper.scrape_all(jobs)
        elapsed = time.monotonic() - t0
    assert elapsed < 0.9, elapsed
    assert [r.outcome for r in results] == ["ok", "ok", "ok", "timeout", "connect_error"]


async def test_cycle_deadline_bounds_targets_queued_behind_concurrency(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    """With one slot and slow targets ahead, queued targets fail at the cycle deadline."""
    slow = [exposition_server(_sleeping(5.0)) for _ in range(3)]
    async with make_client(_cfg()) as client:
        scraper = Scraper(client, timeout_s=0.4, max_concurrency=1, cycle_timeout_s=0.6)
        t0 = time.monotonic()
        results = await scraper.scrape_all([ScrapeJob(s.address) for s in slow])
        elapsed = time.monotonic() - t0
    assert elapsed < 0.9, elapsed  # not 3 x 0.4 s
    assert all(r.outcome == "timeout" for r in results)


def _mock(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_size_cap_applies_to_the_decoded_body_without_content_length() -> None:
    bomb = gzip.compress(b"#" * 2_000_000)  # ~2 KB on the wire, 2 MB decoded

    async def stream() -> AsyncIterator[bytes]:
        yield bomb

    def handler(request: httpx.Request) -> httpx.Response:
        # An async iterator: streamed, no Content-Length to reject up front.
        return httpx.Response(200, content=stream(), headers={"content-encoding": "gzip"})

    async with _mock(handler) as client:
        (res,) = await Scraper(client, timeout_s=1, max_body_bytes=1_000_000).scrape_all(
            [ScrapeJob("t:1")]
        )
    assert res.outcome == "too_large"


async def _stream(body: bytes) -> AsyncIterator[bytes]:
    yield body


# The size cap at its edge, declared up front (Content-Length) and streamed (none):
# (max_body_bytes minus the body's length, streamed, outcome)
SIZE_EDGES = [
    pytest.param(0, False, "ok", id="declared-exactly-the-cap"),
    pytest.param(-1, False, "too_large", id="declared-one-byte-over"),
    pytest.param(0, True, "ok", id="streamed-exactly-the-cap"),
    pytest.param(-1, True, "too_large", id="streamed-one-byte-over"),
]


@pytest.mark.parametrize(("slack", "streamed", "outcome"), SIZE_EDGES)
async def test_size_cap_edges(slack: int, streamed: bool, outcome: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_stream(REAL) if streamed else REAL)

    async with _mock(handler) as client:
        scraper = Scraper(client, timeout_s=1, max_body_bytes=len(REAL) + slack)
        (res,) = await scraper.scrape_all([ScrapeJob("t:1")])
    assert res.outcome == outcome, res.error


async def test_one_target_scraped_alone_has_the_cycle_budget_and_its_duration(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    """`scrape` outside `scrape_all` (no deadline given) gets the cycle's budget from now
    (a real server: the request suspends), and the result's duration is what the injected
    clock saw between start and end."""
    server = exposition_server(lambda: (200, REAL))
    ticks = iter([100.0, 102.5])
    async with make_client(_cfg()) as client:
        res = await Scraper(client, timeout_s=1, clock=lambda: next(ticks)).scrape(
            ScrapeJob(server.address)
        )
    assert (res.outcome, res.at, res.duration_s) == ("ok", 102.5, 2.5), res.error


async def test_bearer_token_file_is_sent_and_rotation_is_picked_up(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        ok = request.headers.get("authorization") == "Bearer second"
        return httpx.Response(200 if ok else 401, content=REAL)

    async with _mock(handler) as client:
        scraper = Scraper(client, timeout_s=1, headers=BearerToken(str(token)).headers)
        (r1,) = await scraper.scrape_all([ScrapeJob("t:1")])
        token.write_text("second-token-rotated\n"[:6] + "\n")  # "second", new size and mtime
        (r2,) = await scraper.scrape_all([ScrapeJob("t:1")])
        token.unlink()
        (r3,) = await scraper.scrape_all([ScrapeJob("t:1")])
    assert seen == ["Bearer first", "Bearer second", None]
    assert (r1.outcome, r2.outcome, r3.outcome) == ("http_error", "ok", "http_error")


async def test_client_asks_for_plain_text_format() -> None:
    seen: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, content=REAL)

    async with make_client(_cfg()) as real:
        headers = dict(real.headers)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), headers=headers) as c:
        await Scraper(c, timeout_s=1).scrape_all([ScrapeJob("t:1", path="/m")])
    assert "text/plain;version=0.0.4" in seen[0]["accept"]
    assert seen[0]["accept-encoding"] == "identity"


# --- TLS -------------------------------------------------------------------------------


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]
            ),
            False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def https_target(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cert, key = _self_signed(tmp_path)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(REAL)))
            self.end_headers()
            self.wfile.write(REAL)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}", cert
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(
    ("settings", "outcome"),
    [
        pytest.param({"caFile": "CERT"}, "ok", id="ca-file-verifies"),
        pytest.param({}, "connect_error", id="unknown-ca-rejected"),
        pytest.param({"insecureSkipVerify": True}, "ok", id="insecure-skip-verify"),
    ],
)
async def test_https_targets(
    https_target: tuple[str, Path], settings: dict[str, object], outcome: str
) -> None:
    address, cert = https_target
    kw = {k: (str(cert) if v == "CERT" else v) for k, v in settings.items()}
    cfg = _cfg(scheme="https", timeoutSeconds=2, **kw)
    async with make_client(cfg) as client:
        (res,) = await Scraper(client, timeout_s=2).scrape_all(
            [ScrapeJob(address, scheme=cfg.scheme)]
        )
    assert res.outcome == outcome, res.error
    if outcome == "ok":
        assert res.sample is not None


async def test_many_targets_share_one_deadline(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    servers = [exposition_server(lambda: (200, REAL)) for _ in range(8)]
    async with make_client(_cfg(maxConcurrency=3)) as client:
        scraper = Scraper(client, timeout_s=2, max_concurrency=3)
        results = await asyncio.wait_for(
            scraper.scrape_all([ScrapeJob(s.address) for s in servers]), 5
        )
    assert [r.outcome for r in results] == ["ok"] * 8
    assert all(s.requests == 1 for s in servers)


async def test_pod_without_ip_is_not_dialed() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, content=REAL)

    async with _mock(handler) as client:
        (res,) = await Scraper(client, timeout_s=1).scrape_all([ScrapeJob("serving/pod-a")])
    assert calls == [] and res.outcome == "connect_error" and res.sample is None


async def test_per_target_pools_are_reused_and_idle_ones_evicted(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    servers = [exposition_server(lambda: (200, REAL)) for _ in range(3)]
    now = [0.0]
    transport = PerTargetTransport(idle_evict_s=60, clock=lambda: now[0])
    async with httpx.AsyncClient(transport=transport) as client:
        scraper = Scraper(client, timeout_s=2)
        for _ in range(2):  # keep-alive: the second cycle reuses the three pools
            results = await scraper.scrape_all([ScrapeJob(s.address) for s in servers])
            assert [r.outcome for r in results] == ["ok"] * 3
        assert len(transport) == 3
        now[0] = 61.0  # two targets went away (scaled down); one is still scraped
        (res,) = await scraper.scrape_all([ScrapeJob(servers[0].address)])
        assert res.outcome == "ok" and len(transport) == 1


async def test_unexpected_reader_error_fails_only_that_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import scaler.ingest.scrape as scrape_mod

    def broken(text: str, engine: str, model: str | None, **_: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(scrape_mod, "read_sample", broken)
    async with _mock(lambda request: httpx.Response(200, content=REAL)) as client:
        (res,) = await Scraper(client, timeout_s=1).scrape_all([ScrapeJob("t:1")])
    assert res.outcome == "malformed" and res.error is not None and "KeyError" in res.error


async def test_a_late_answer_counts_in_the_next_cycle_and_no_second_request_goes_out(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    """scrape.lateAnswerSeconds: an engine answering /metrics after the cycle's deadline is
    read in the next cycle, stamped when its answer came, and is not asked twice."""
    server = exposition_server(_sleeping(1.2))
    seen: list[ScrapeResult] = []
    cfg = _cfg(lateAnswerSeconds=3, timeoutSeconds=0.3)
    scraper = Scraper.from_config(make_client(cfg), cfg, observe=seen.append)
    job = ScrapeJob(server.address)
    try:
        t0 = time.monotonic()
        (first,) = await scraper.scrape_all([job])
        assert time.monotonic() - t0 < 0.6  # the cycle does not wait for it
        assert first.outcome == "timeout" and first.sample is None
        assert first.error is not None and "kept open up to 3s more" in first.error

        await asyncio.sleep(1.4)  # the answer comes ~1.2 s after the request went out
        t1 = time.monotonic()
        (second,) = await scraper.scrape_all([job])
        assert second.outcome == "ok" and second.sample is not None
        assert second.sample.generation_tokens_total == 8000.0
        assert t0 + 1.1 < second.at < t1  # when it came, not when this cycle read it
        assert second.duration_s >= 1.1
        assert server.requests == 1

        (third,) = await scraper.scrape_all([job])  # answered: the next cycle asks anew
        assert third.outcome == "timeout" and server.requests == 2
        assert [r.outcome for r in seen] == ["timeout", "ok", "timeout"]
    finally:
        await scraper.aclose()
    assert scraper._late == {}


@pytest.mark.parametrize(
    ("late", "requests", "outcome"),
    [
        pytest.param(0, 2, "timeout", id="off-each-cycle-asks-again"),
        pytest.param(0.3, 2, "timeout", id="answer-later-than-kept-open"),
    ],
)
async def test_an_answer_later_than_allowed_is_not_read(
    exposition_server: Callable[..., ExpositionServer], late: float, requests: int, outcome: str
) -> None:
    server = exposition_server(_sleeping(1.2))
    cfg = _cfg(lateAnswerSeconds=late, timeoutSeconds=0.3)
    scraper = Scraper.from_config(make_client(cfg), cfg)
    job = ScrapeJob(server.address)
    try:
        (first,) = await scraper.scrape_all([job])
        await asyncio.sleep(1.4)
        (second,) = await scraper.scrape_all([job])
        await asyncio.sleep(0.1)  # the second request reaches the server
    finally:
        await scraper.aclose()
    assert first.outcome == "timeout" and second.outcome == outcome and second.sample is None
    assert server.requests == requests


async def test_a_request_kept_open_for_a_target_gone_is_cancelled(
    exposition_server: Callable[..., ExpositionServer],
) -> None:
    slow, fast = exposition_server(_sleeping(2.0)), exposition_server(lambda: (200, REAL))
    cfg = _cfg(lateAnswerSeconds=3, timeoutSeconds=0.3)
    scraper = Scraper.from_config(make_client(cfg), cfg)
    try:
        (res,) = await scraper.scrape_all([ScrapeJob(slow.address)])
        assert res.outcome == "timeout" and set(scraper._late) == {ScrapeJob(slow.address)}
        kept = scraper._late[ScrapeJob(slow.address)]
        (res,) = await scraper.scrape_all([ScrapeJob(fast.address)])  # slow's pod is gone
        assert res.outcome == "ok" and scraper._late == {}
        await asyncio.sleep(0)
        assert kept.cancelled() or kept.done()
    finally:
        await scraper.aclose()
