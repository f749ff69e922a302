"""Scrape targets' /metrics concurrently with one shared httpx.AsyncClient.

Every target gets its own deadline (`timeout_s` from when it starts), and the whole cycle
one more: nothing runs past `cycle start + cycle_timeout_s` (default `timeout_s`), so a
slow or dead target, or a queue behind `max_concurrency`, can never delay the cycle past
`timeoutSeconds`. Errors are results, never exceptions.

With `late_answer_s` (`scrape.lateAnswerSeconds`) a request still unanswered when the
cycle ends is kept open that much longer instead of being dropped: the cycle reports it
as a timeout, no second request goes to that target meanwhile, and the answer, stamped
with the time it came, is the target's result in the next cycle. An engine that answers
/metrics late under load is then read every few cycles instead of never.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from scaler.config import ScrapeConfig
from scaler.core.exposition import ParseError, read_sample
from scaler.core.load import EngineSample, Outcome, ScrapeJob, ScrapeResult
from scaler.ingest.http1 import LeanHTTP1Transport

log = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    pass


@functools.lru_cache(maxsize=8192)
def _url(job: ScrapeJob) -> httpx.URL:
    # Parsing the URL string is a third of httpx's request-building time; targets repeat.
    return httpx.URL(f"{job.scheme}://{job.address}{job.path}")


# Text format 0.0.4 explicitly (not OpenMetrics), uncompressed: on the scaler's side
# gunzip of 500 x 50 KB per cycle costs more CPU than the bytes cost on the network.
DEFAULT_HEADERS = {
    "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
    "Accept-Encoding": "identity",
}


class PerTargetTransport(httpx.AsyncBaseTransport):
    """One small connection pool per target under the one shared client.

    httpcore's pool scans every pooled connection at each request start and end, so one
    pool holding a keep-alive connection per target costs O(targets) per request: with 500
    targets that was ~3 ms of CPU per scrape and 1.5-2 s per cycle (bench/scrape_cycle.py).
    A pool per host:port keeps each scan to one connection. Pools of targets not scraped
    for `idle_evict_s` are closed (pods come and go).
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        idle_evict_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if verify is True:
            verify = ssl.create_default_context()  # built once, shared by every pool
        self._verify = verify
        self._pools: dict[
            tuple[bytes, bytes, int | None], tuple[httpx.AsyncHTTPTransport, float]
        ] = {}
        self._idle = idle_evict_s
        self._clock = clock
        self._next_sweep = clock() + idle_evict_s

    def _pool(self, request: httpx.Request) -> httpx.AsyncHTTPTransport:
        url = request.url
        key = (url.raw_scheme, url.raw_host, url.port)
        entry = self._pools.get(key)
        pool = entry[0] if entry is not None else None
        if pool is None:
            pool = httpx.AsyncHTTPTransport(
                verify=self._verify,
                trust_env=False,
                limits=httpx.Limits(max_connections=2, max_keepalive_connections=1),
            )
        self._pools[key] = (pool, self._clock())
        return pool

    async def _sweep(self) -> None:
        now = self._clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._idle
        stale = [k for k, (_, used) in self._pools.items() if now - used > self._idle]
        for k in stale:
            pool, _ = self._pools.pop(k)
            await pool.aclose()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._sweep()
        return await self._pool(request).handle_async_request(request)

    async def aclose(self) -> None:
        pools, self._pools = self._pools, {}
        for pool, _ in pools.values():
            await pool.aclose()

    def __len__(self) -> int:
        return len(self._pools)


TRANSPORTS = ("lean", "httpx-per-target", "httpx")


def make_client(cfg: ScrapeConfig, transport: str = "lean") -> httpx.AsyncClient:
    """The one AsyncClient every scrape shares (connection reuse across cycles).

    TLS: `caFile` verifies https targets against that bundle, `insecureSkipVerify` does
    not verify at all (both only matter for scheme https). Redirects are not followed and
    proxy environment variables are ignored: a target is an address, not a URL to chase.
    Concurrency is bounded by the Scraper, not by the pool. Plain-http targets go through
    LeanHTTP1Transport (scaler/ingest/http1.py), https through PerTargetTransport.
    `transport` selects the library-only alternatives for `bench/scrape_cycle.py`, which
    keeps the measurement that justifies the hand-written one.
    """
    verify: ssl.SSLContext | bool = True
    if cfg.insecureSkipVerify:
        verify = False
    elif cfg.caFile:
        verify = ssl.create_default_context(cafile=cfg.caFile)
    base: httpx.AsyncBaseTransport
    if transport == "lean":
        base = LeanHTTP1Transport(PerTargetTransport(verify=verify))
    elif transport == "httpx-per-target":
        base = PerTargetTransport(verify=verify)
    elif transport == "httpx":
        limit = cfg.maxConcurrency
        base = httpx.AsyncHTTPTransport(
            verify=verify,
            trust_env=False,
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
        )
    else:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    return httpx.AsyncClient(
        transport=base,
        # The read may run past the cycle for a late answer; the Scraper's own deadline
        # (timeoutSeconds, or + lateAnswerSeconds) is what ends it.
        timeout=httpx.Timeout(
            cfg.timeoutSeconds + cfg.lateAnswerSeconds, connect=min(1.0, cfg.timeoutSeconds)
        ),
        headers=DEFAULT_HEADERS,
        follow_redirects=False,
        trust_env=False,
    )


class BearerToken:
    """`Authorization: Bearer` from a file, re-read when the file changes (token rotation).

    A projected service-account token is rewritten in place by the kubelet; checking the
    file's mtime/size per call costs one stat(). An unreadable file sends no header (the
    target then answers 401, which marks it failed) rather than crashing the cycle.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._stamp: tuple[float, int] | None = None
        self._headers: dict[str, str] = {}

    def headers(self) -> dict[str, str]:
        try:
            st = os.stat(self._path)
            stamp = (st.st_mtime, st.st_size)
            if stamp != self._stamp:
                with open(self._path, encoding="utf-8") as f:
                    token = f.read().strip()
                self._headers = {"Authorization": f"Bearer {token}"} if token else {}
                self._stamp = stamp
        except OSError:
            self._headers, self._stamp = {}, None
        return self._headers


def headers_provider(cfg: ScrapeConfig) -> Callable[[], dict[str, str]] | None:
    return BearerToken(cfg.bearerTokenFile).headers if cfg.bearerTokenFile else None


class Scraper:
    @classmethod
    def from_config(cls, client: httpx.AsyncClient, cfg: ScrapeConfig, **kwargs: Any) -> Scraper:
        """The scraper the config asks for (limits, deadline, bearer token) on `client`."""
        token = cfg.bearerTokenFile
        return cls(
            client,
            timeout_s=cfg.timeoutSeconds,
            max_concurrency=cfg.maxConcurrency,
            max_body_bytes=cfg.maxBodyBytes,
            headers=BearerToken(token).headers if token else None,
            late_answer_s=cfg.lateAnswerSeconds,
            **kwargs,
        )

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timeout_s: float,
        max_concurrency: int = 64,
        max_body_bytes: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
        headers: Callable[[], dict[str, str]] | None = None,
        observe: Callable[[ScrapeResult], None] | None = None,
        cycle_timeout_s: float | None = None,
        late_answer_s: float = 0.0,
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._late_answer_s = late_answer_s
        # Requests kept open past their cycle (late_answer_s), one per target at most.
        self._late: dict[ScrapeJob, asyncio.Task[ScrapeResult]] = {}
        self._cycle_timeout_s = timeout_s if cycle_timeout_s is None else cycle_timeout_s
        self._sem = asyncio.Semaphore(max_concurrency)
        self._max_body = max_body_bytes
        self._clock = clock
        self._headers = headers
        self._observe = observe

    async def _fetch(self, job: ScrapeJob, headers: dict[str, str] | None) -> bytes:
        async with self._client.stream("GET", _url(job), headers=headers) as resp:
            if resp.status_code != 200:
                raise httpx.HTTPStatusError(
                    f"HTTP {resp.status_code}", request=resp.request, response=resp
                )
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self._max_body:
                raise BodyTooLarge(f"response larger than {self._max_body} bytes ({declared})")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():  # decoded: a gzip bomb hits the cap too
                size += len(chunk)
                if size > self._max_body:
                    raise BodyTooLarge(f"response larger than {self._max_body} bytes")
                chunks.append(chunk)
        return b"".join(chunks)

    async def scrape(
        self,
        job: ScrapeJob,
        *,
        deadline: float | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ScrapeResult:
        """Scrape one target. `deadline` (event-loop time) caps waiting for a slot too;
        `timeout_s`: this request's own deadline (default `timeout_s` of the scraper)."""
        if "/" in job.address:  # discovery's placeholder for a pod without an IP yet
            now = self._clock()
            result = ScrapeResult(
                job, None, "no address yet (pod starting)", now, 0.0, "connect_error"
            )
            if self._observe is not None:
                self._observe(result)
            return result
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self._cycle_timeout_s
        timeout = self._timeout_s if timeout_s is None else timeout_s
        if headers is None and self._headers is not None:
            headers = self._headers()
        start = self._clock()
        sample: EngineSample | None = None
        error: str | None = None
        outcome: Outcome = "ok"
        size = 0
        try:
            async with asyncio.timeout_at(deadline):
                async with self._sem:
                    async with asyncio.timeout(timeout):
                        body = await self._fetch(job, headers)
            size = len(body)
            sample = read_sample(
                body.decode("utf-8", errors="replace"),
                job.engine,
                job.model,
                ttft=job.ttft,
                itl=job.itl,
            )
            if sample is None:
                outcome, error = "no_data", "no engine metrics (is --disable-log-stats set?)"
        except TimeoutError:
            outcome, error = "timeout", f"timeout after {timeout:g}s"
        except ParseError as e:
            outcome, error = "malformed", f"malformed exposition: {e}"
        except BodyTooLarge as e:
            outcome, error = "too_large", str(e)
        except httpx.HTTPStatusError as e:
            outcome, error = "http_error", str(e).split(" for url")[0]
        except httpx.TimeoutException as e:
            outcome, error = "timeout", f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        except (httpx.HTTPError, httpx.InvalidURL, ssl.SSLError, OSError) as e:
            outcome = "connect_error"
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        except Exception as e:  # a bug on odd input must fail this target, not the cycle
            log.exception("unexpected error scraping %s", job.address)
            outcome, error = "malformed", f"unexpected {type(e).__name__}: {e}"[:300]
        end = self._clock()
        result = ScrapeResult(job, sample, error, end, end - start, outcome, size)
        if self._observe is not None:
            self._observe(result)
        return result

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]:
        """Scrape every job at once (bounded by max_concurrency), all within one deadline."""
        deadline = asyncio.get_running_loop().time() + self._cycle_timeout_s
        headers = self._headers() if self._headers is not None else None  # once per cycle
        if self._late_answer_s > 0:
            return await self._scrape_all_keeping_late(jobs, deadline, headers)
        return list(
            await asyncio.gather(
                *(self.scrape(j, deadline=deadline, headers=headers) for j in jobs)
            )
        )

    async def _scrape_all_keeping_late(
        self, jobs: Sequence[ScrapeJob], deadline: float, headers: dict[str, str] | None
    ) -> list[ScrapeResult]:
        loop = asyncio.get_running_loop()
        wanted = set(jobs)
        for job in [j for j in self._late if j not in wanted]:  # target gone: stop waiting
            self._late.pop(job).cancel()
        longest = self._timeout_s + self._late_answer_s
        tasks: dict[ScrapeJob, asyncio.Task[ScrapeResult]] = {}
        for job in dict.fromkeys(jobs):
            kept = self._late.pop(job, None)
            # A request kept open from an earlier cycle stands for this cycle's, unless it
            # timed out after all (that cycle already counted the timeout): ask again.
            if kept is not None and not (kept.done() and kept.result().outcome == "timeout"):
                tasks[job] = kept
            else:
                tasks[job] = loop.create_task(
                    self.scrape(
                        job, deadline=loop.time() + longest, headers=headers, timeout_s=longest
                    )
                )
        await asyncio.wait(tasks.values(), timeout=max(0.0, deadline - loop.time()))
        late = {job: t for job, t in tasks.items() if not t.done()}
        self._late.update(late)
        now = self._clock()
        pending = {
            job: ScrapeResult(
                job,
                None,
                f"no answer within {self._timeout_s:g}s (request kept open up to "
                f"{self._late_answer_s:g}s more; its answer counts next cycle)",
                now,
                self._timeout_s,
                "timeout",
            )
            for job in late
        }
        for r in pending.values():
            if self._observe is not None:
                self._observe(r)
        return [pending[j] if j in pending else tasks[j].result() for j in jobs]

    async def aclose(self) -> None:
        """Stop waiting for late answers and close the client."""
        late, self._late = self._late, {}
        for t in late.values():
            t.cancel()
        await asyncio.gather(*late.values(), return_exceptions=True)
        await self._client.aclose()


class ScraperFollowingConfig:
    """Scrapes with the scrape settings in force: a reload that changes `scrape:`
    (timeouts, limits, TLS, bearer token) builds a new scraper and closes the old one
    before the next cycle, so no setting is half-applied. `build` returns a scraper and
    its close function (an in-process `Scraper` with its client, or a worker process)."""

    def __init__(
        self,
        config: Callable[[], ScrapeConfig],
        build: Callable[[ScrapeConfig], tuple[Any, Callable[[], Awaitable[None]]]],
    ) -> None:
        self._config = config
        self._build = build
        self._cfg: ScrapeConfig | None = None
        self._scraper: Any = None
        self._close: Callable[[], Awaitable[None]] | None = None
        self.rebuilds = 0  # scrapers built after the first (a reload changed `scrape:`)

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]:
        cfg = self._config()
        if cfg != self._cfg:
            if self._cfg is not None:
                changed = sorted(
                    k for k in type(cfg).model_fields if getattr(cfg, k) != getattr(self._cfg, k)
                )
                log.info("scrape settings changed (%s): new scrape client", ", ".join(changed))
                self.rebuilds += 1
            await self.aclose()
            self._scraper, self._close = self._build(cfg)
            self._cfg = cfg
        result: list[ScrapeResult] = await self._scraper.scrape_all(jobs)
        return result

    async def aclose(self) -> None:
        close, self._close = self._close, None
        self._scraper = None
        self._cfg = None
        if close is not None:
            await close()
