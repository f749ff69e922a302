"""ProcessScraper: the real Scraper in a spawned worker process."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool

import pytest

from scaler.config import ScrapeConfig
from scaler.core.load import ScrapeJob
from scaler.ingest.scrape_worker import ProcessScraper
from tests.support.exposition import ExpositionServer, vllm_exposition


async def test_worker_scrapes_and_survives_being_killed(
    exposition_server: Callable[[str], ExpositionServer],
) -> None:
    target = exposition_server(vllm_exposition(waiting=7, running=3, kv=0.25))
    scraper = ProcessScraper(ScrapeConfig(intervalSeconds=5, timeoutSeconds=2))
    try:
        (res,) = await scraper.scrape_all([ScrapeJob(target.address)])
        assert res.error is None and res.sample is not None
        assert (res.sample.waiting, res.sample.running, res.sample.kv_usage_mean) == (7, 3, 0.25)

        pool = scraper._executor()
        (pid,) = pool._processes  # the one worker
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):  # that cycle fails; the loop keeps its decision
            await scraper.scrape_all([ScrapeJob(target.address)])

        (res,) = await scraper.scrape_all([ScrapeJob(target.address)])  # a new worker
        assert res.error is None and res.sample is not None and res.sample.waiting == 7
    finally:
        await scraper.aclose()


async def test_worker_reads_a_late_answer_when_it_comes(
    exposition_server: Callable[[str], ExpositionServer],
) -> None:
    """The worker's event loop runs between cycles, so an answer kept open for
    (scrape.lateAnswerSeconds) is stamped when it came, not when the next cycle ran."""
    body = vllm_exposition(waiting=7, running=3, kv=0.25).encode()

    def slow() -> tuple[int, bytes]:
        time.sleep(1.0)
        return 200, body

    target = exposition_server(slow)  # type: ignore[arg-type]
    cfg = ScrapeConfig(intervalSeconds=5, timeoutSeconds=0.3, lateAnswerSeconds=3)
    scraper = ProcessScraper(cfg)
    try:
        await scraper.scrape_all([ScrapeJob(vllm_address := target.address)])  # worker warm-up
        await asyncio.sleep(1.5)
        await scraper.scrape_all([ScrapeJob(vllm_address)])  # the warm-up's answer
        t0 = time.monotonic()
        (first,) = await scraper.scrape_all([ScrapeJob(vllm_address)])
        assert first.outcome == "timeout" and "kept open" in (first.error or "")
        await asyncio.sleep(2.0)  # answered ~1 s after t0; the worker's loop was idle since
        t1 = time.monotonic()
        (second,) = await scraper.scrape_all([ScrapeJob(vllm_address)])
        assert second.sample is not None and second.sample.waiting == 7
        assert t0 + 0.9 < second.at < t1 - 0.5, (second.at - t0, t1 - t0)
        assert target.requests == 2
    finally:
        await scraper.aclose()
