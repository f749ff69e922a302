"""ScraperFollowingConfig: a changed `scrape:` section builds a new scraper (and closes the
old one) before the next cycle; an unchanged one keeps the scraper and its connections."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from scaler.config import ScrapeConfig
from scaler.core.load import ScrapeJob, ScrapeResult
from scaler.ingest.scrape import ScraperFollowingConfig


class FakeScraper:
    def __init__(self, cfg: ScrapeConfig, log: list[str]) -> None:
        self.cfg, self.log = cfg, log

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]:
        self.log.append(f"scrape timeout={self.cfg.timeoutSeconds}")
        return [ScrapeResult(j, None, "fake", 0.0, 0.0) for j in jobs]


async def test_rebuilds_only_when_the_scrape_section_changes() -> None:
    log: list[str] = []
    current = [ScrapeConfig()]

    def build(cfg: ScrapeConfig) -> tuple[Any, Callable[[], Awaitable[None]]]:
        log.append(f"build timeout={cfg.timeoutSeconds}")

        async def close() -> None:
            log.append(f"close timeout={cfg.timeoutSeconds}")

        return FakeScraper(cfg, log), close

    s = ScraperFollowingConfig(lambda: current[0], build)
    jobs = [ScrapeJob("127.0.0.1:1")]
    await s.scrape_all(jobs)
    await s.scrape_all(jobs)
    current[0] = ScrapeConfig(timeoutSeconds=2.0)  # equal content: same scraper
    await s.scrape_all(jobs)
    current[0] = ScrapeConfig(timeoutSeconds=1.0)
    await s.scrape_all(jobs)
    await s.aclose()
    assert log == [
        "build timeout=2.0",
        "scrape timeout=2.0",
        "scrape timeout=2.0",
        "scrape timeout=2.0",
        "close timeout=2.0",
        "build timeout=1.0",
        "scrape timeout=1.0",
        "close timeout=1.0",
    ]
    assert s.rebuilds == 1
