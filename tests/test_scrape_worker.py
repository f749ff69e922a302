"""ProcessScraper: the real Scraper in a spawned worker process."""

from __future__ import annotations

import os
import signal
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
