"""Scrape targets' /metrics concurrently with one shared httpx.AsyncClient.

Every target gets its own deadline; a slow or dead target fails alone and can never
delay the cycle past `timeoutSeconds`. Errors are results, never exceptions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from scaler.exposition import Engine, ParseError, read_sample
from scaler.load import EngineSample


@dataclass(frozen=True, slots=True)
class ScrapeJob:
    address: str  # host:port
    engine: Engine = "vllm"
    model: str | None = None
    path: str = "/metrics"
    scheme: str = "http"


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    job: ScrapeJob
    sample: EngineSample | None  # None: failed, or no engine families
    error: str | None  # None on success; "no engine metrics" when the target exports none
    at: float  # clock time when the response was complete
    duration_s: float


class BodyTooLarge(Exception):
    pass


class Scraper:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timeout_s: float,
        max_concurrency: int = 64,
        max_body_bytes: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
        headers: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._sem = asyncio.Semaphore(max_concurrency)
        self._max_body = max_body_bytes
        self._clock = clock
        self._headers = headers

    async def _fetch(self, job: ScrapeJob) -> str:
        url = f"{job.scheme}://{job.address}{job.path}"
        headers = self._headers() if self._headers else None
        async with self._client.stream("GET", url, headers=headers) as resp:
            if resp.status_code != 200:
                raise httpx.HTTPStatusError(
                    f"HTTP {resp.status_code}", request=resp.request, response=resp
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self._max_body:
                    raise BodyTooLarge(f"response larger than {self._max_body} bytes")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    async def scrape(self, job: ScrapeJob) -> ScrapeResult:
        start = self._clock()
        sample: EngineSample | None = None
        error: str | None = None
        async with self._sem:
            try:
                async with asyncio.timeout(self._timeout_s):
                    text = await self._fetch(job)
                sample = read_sample(text, job.engine, job.model)
                if sample is None:
                    error = "no engine metrics (is --disable-log-stats set?)"
            except TimeoutError:
                error = f"timeout after {self._timeout_s:g}s"
            except ParseError as e:
                error = f"malformed exposition: {e}"
            except BodyTooLarge as e:
                error = str(e)
            except httpx.HTTPStatusError as e:
                error = str(e).split(" for url")[0]
            except httpx.HTTPError as e:
                error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        end = self._clock()
        return ScrapeResult(job, sample, error, end, end - start)

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]:
        return list(await asyncio.gather(*(self.scrape(j) for j in jobs)))
