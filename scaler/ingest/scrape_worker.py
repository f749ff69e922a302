"""Scraping in a worker process, so that the serving process keeps its CPU and GIL for gRPC.

A 500-target cycle costs ~0.26 CPU s (HTTP + exposition parsing). In the serving process
that work delays KEDA's calls even from a thread of its own: both hold the same GIL
(docs/operations.md#load). `ProcessScraper` has the `scrape_all` of `scaler.ingest.scrape.Scraper`
and runs the real Scraper (its own event loop, httpx client and kept-alive connections)
in one spawned worker; only jobs and the small ScrapeResults cross the pipe.

A worker that dies fails that cycle (the control loop keeps the previous decision) and is
replaced on the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from scaler.config import ScrapeConfig
from scaler.core.load import ScrapeJob, ScrapeResult
from scaler.ingest.scrape import Scraper, make_client
from scaler.logs import setup_logging

log = logging.getLogger(__name__)

WORKER_NICENESS = 5  # ~1/3 of the serving process's CPU weight when both want a core

# Worker-process state: its event loop and Scraper, built once by `_init` so connections
# are reused across cycles. Lives only in the worker; the serving process never sets it.
_worker: tuple[asyncio.AbstractEventLoop, Scraper] | None = None


PARENT_CHECK_SECONDS = 0.5


def _exit_with_parent(parent: int) -> None:
    """End this worker soon after the serving process dies, however it died.

    A SIGKILLed server runs no cleanup: the executor never tells its worker to stop, and
    the worker (and with it multiprocessing's resource tracker, which lives until every
    holder of its pipe is gone) would run on as an orphan. Polling the parent pid works
    on every POSIX system; Linux's parent-death signal is not used because it follows the
    thread that spawned the worker, not the process.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)  # reparented: the server is gone

    if os.getppid() != parent:
        os._exit(0)  # died before we got here
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _init(cfg: ScrapeConfig, parent: int) -> None:
    global _worker
    _exit_with_parent(parent)
    # A spawned process starts with bare logging: same format as the server (JSON in a
    # pod); only warnings and errors, the per-target story is logged by the server.
    setup_logging("auto", "WARNING")
    # Below the serving process in the CPU scheduler: a cycle has seconds of slack
    # (timeoutSeconds), a KEDA call has milliseconds. Raising niceness needs no privilege,
    # and in a container it only orders the pod's own processes (cgroup weights between
    # pods are unchanged). Measured in docs/operations.md#load.
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    # The loop runs between cycles too, in a thread of its own: a request kept open for a
    # late answer (scrape.lateAnswerSeconds) is read, and stamped, when the answer comes,
    # not when the next cycle would next run the loop.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="scrape-loop", daemon=True).start()
    scraper = asyncio.run_coroutine_threadsafe(_build(cfg), loop).result()
    _worker = (loop, scraper)


async def _build(cfg: ScrapeConfig) -> Scraper:
    return Scraper.from_config(make_client(cfg), cfg)  # its semaphore binds to this loop


def _scrape_all(jobs: list[ScrapeJob]) -> list[ScrapeResult]:
    assert _worker is not None, "worker not initialised"
    loop, scraper = _worker
    return asyncio.run_coroutine_threadsafe(scraper.scrape_all(jobs), loop).result()


class ProcessScraper:
    """`Scraper.scrape_all` in a worker process (spawned: never fork a gRPC process)."""

    def __init__(self, cfg: ScrapeConfig) -> None:
        self._cfg = cfg
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init,
                initargs=(self._cfg, os.getpid()),
            )
        return self._pool

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), _scrape_all, list(jobs))
        except BrokenProcessPool:
            log.error("scrape worker died; starting a new one for the next cycle")
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            raise

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)
