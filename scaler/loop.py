"""The control loop: discover -> scrape -> track -> `core.cycle.step` -> publish.

One cycle per `scrape.intervalSeconds`. Everything it talks to is injected (config
provider, discovery, scraper, capacity, clocks); the decision itself is the pure
`scaler.core.cycle.step`, which the simulator and the demo call too. The cycle never
raises: a failing part degrades to "no data" for that part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from scaler.config import Config, InferenceService
from scaler.core import memory
from scaler.core.accounting import Capacity, HarvestMeter
from scaler.core.cycle import CycleInput, CycleState, step
from scaler.core.decision import Decision, QueueRead
from scaler.core.load import Endpoint, ScrapeJob, ScrapeResult, TargetState
from scaler.core.tracker import TargetTracker
from scaler.ingest.discovery import Discovery
from scaler.ingest.state_store import StateStore
from scaler.research.depth import QueueReader
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots

log = logging.getLogger("scaler.loop")


class ScrapeAll(Protocol):
    """`ingest.scrape.Scraper`, or `ingest.scrape_worker.ProcessScraper` (same results)."""

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]: ...


@dataclass(frozen=True, slots=True)
class LoopDeps:
    capacity: Callable[[Config], Capacity | None]  # current capacity under this config
    harvest: HarvestMeter | None = None
    # server.stateFile / stateConfigMap: restore the policy memory on the first cycle, save
    # it at most every server.stateWriteSeconds (and at shutdown) unless `save_state` is off
    # (a one-shot `explain` reads the server's memory but never writes it).
    state: StateStore | None = None
    save_state: bool = True
    # Research classes with a `queue`: their outstanding items, read beside the scrape
    # (None: not read, so those classes get 0 slots).
    queue: QueueReader | None = None


class ControlLoop:
    def __init__(
        self,
        config: Callable[[], tuple[Config, int]],  # (config in force, its generation)
        discovery: Callable[[InferenceService], Discovery],
        scraper: ScrapeAll,
        snapshots: Snapshots,
        deps: LoopDeps,
        metrics: ScalerMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._discovery = discovery
        self._scraper = scraper
        self._snapshots = snapshots
        self._deps = deps
        self._metrics = metrics
        self._clock = clock
        self._wall = wall_clock
        self._tracker = TargetTracker()
        self._state = CycleState()
        self._known: tuple[set[str], set[str]] = (set(), set())
        self.last_cycle_at: float | None = None  # clock time, for /healthz
        self._restored = False
        self._saved_at: float | None = None
        self._save_error: str | None = None

    async def run_once(self) -> Decision:
        cfg, generation = self._config()
        started = self._clock()
        if not self._restored:
            self._restored = True
            await self._restore(cfg)
        self._forget_removed(cfg)

        endpoints: dict[str, list[Endpoint] | None] = {}
        jobs: list[tuple[str, ScrapeJob]] = []
        for svc in cfg.inference:
            eps = self._discovery(svc).endpoints(svc)
            endpoints[svc.name] = eps
            for ep in eps or ():
                job = ScrapeJob(
                    ep.address,
                    svc.engine,
                    svc.model,
                    svc.targets.metricsPath,
                    cfg.scrape.scheme,
                    ttft=svc.slo is not None,
                    itl=svc.slo is not None and svc.slo.itlSeconds is not None,
                )
                jobs.append((svc.name, job))
        results, queued = await asyncio.gather(
            self._scraper.scrape_all([j for _, j in jobs]), self._read_queues(cfg)
        )

        by_service: dict[str, dict[str, ScrapeResult]] = {s.name: {} for s in cfg.inference}
        for (service, _), res in zip(jobs, results, strict=True):
            by_service[service][res.job.address] = res
            # The outcome (timeout, http_error, malformed, ...) tells the SRE which fault.
            self._metrics.scrapes.labels(service, res.outcome).inc()
            self._metrics.scrape_duration.observe(res.duration_s)

        targets: dict[str, list[TargetState] | None] = {}
        for svc in cfg.inference:
            eps = endpoints[svc.name]
            targets[svc.name] = (
                None if eps is None else self._tracker.update(svc.name, eps, by_service[svc.name])
            )
        now = self._clock()
        wall = self._wall()
        inp = CycleInput(
            cfg,
            targets,
            self._deps.capacity(cfg),
            now,
            wall,
            generation,
            calendar=wall,
            queued=queued,
        )
        result, self._state = step(inp, self._state)
        self._log_changes(result)
        if self._deps.harvest is not None and result.pool is not None:
            before = self._deps.harvest.gpu_hours
            self._deps.harvest.observe(result.pool.research_gpus, now)
            self._metrics.harvested.inc(max(0.0, self._deps.harvest.gpu_hours - before))

        self._snapshots.publish(result)
        store = self._deps.state
        every = cfg.server.stateWriteSeconds
        if store is not None and (self._saved_at is None or now - self._saved_at >= every):
            await self.save_state(cfg)
        self._metrics.cycles.inc()
        self._metrics.cycle_duration.observe(self._clock() - started)
        self.last_cycle_at = self._clock()
        return result

    async def _read_queues(self, cfg: Config) -> Mapping[str, QueueRead]:
        reader = self._deps.queue
        if reader is None or not any(c.queue is not None for c in cfg.research):
            return {}
        try:
            return await reader.read(cfg)
        except Exception:  # a bug here must not stop inference scaling: research gets 0
            log.exception("work queue read failed; queue-fed classes get 0 slots")
            return {}

    async def _restore(self, cfg: Config) -> None:
        store = self._deps.state
        if store is None:
            return
        try:
            text = await asyncio.to_thread(store.load)
        except OSError as e:
            log.warning("state not restored: cannot read %s: %s", store.describe(), e)
            return
        if text is None:
            log.info("no saved state in %s: starting fresh", store.describe())
            return
        state, why = memory.restore(text, cfg, self._clock(), self._wall())
        if state is None:
            log.warning("%s (%s)", why, store.describe())
            return
        self._state = state
        log.info("%s from %s", why, store.describe())

    async def save_state(self, cfg: Config | None = None) -> None:
        """Write the memory now (the loop calls this at most every stateWriteSeconds, and the
        app at shutdown). A failure is logged once per distinct error and retried later."""
        store = self._deps.state
        if store is None or not self._deps.save_state or self._state.seq == 0:
            return
        cfg = cfg or self._config()[0]
        now = self._clock()
        text = memory.dump(self._state, cfg, now, self._wall())
        self._saved_at = now
        try:
            await asyncio.to_thread(store.save, text)
        except OSError as e:
            if str(e) != self._save_error:
                log.warning("state not saved to %s: %s", store.describe(), e)
            self._save_error = str(e)
            return
        if self._save_error is not None:
            log.info("state saved to %s again", store.describe())
        self._save_error = None

    def _log_changes(self, result: Decision) -> None:
        latest = self._snapshots.latest().services
        for name, decision in result.services.items():
            old = latest.get(name)
            if old is None or old.desired != decision.desired or old.fresh != decision.fresh:
                # A change made with a backlog no signal reads is logged as a warning: the
                # config lets the service shrink with requests waiting (explain says why).
                unread = f"; queue unread: {decision.queue_note}" if decision.queue_note else ""
                (log.warning if unread else log.info)(
                    "desired %s -> %s: %s%s",
                    None if old is None else old.desired,
                    decision.desired,
                    decision.reason,
                    unread,
                    extra={"service": name, "namespace": decision.namespace},
                )

    def _forget_removed(self, cfg: Config) -> None:
        services = {s.name for s in cfg.inference}
        classes = {r.name for r in cfg.research}
        if (services, classes) == self._known:
            return
        for name in self._known[0] - services:
            self._tracker.forget_service(name)
        self._known = (services, classes)

    async def run(self, stop: asyncio.Event) -> None:
        """Cycle until `stop` is set. Cycles start on a fixed cadence (no drift)."""
        next_at = self._clock()
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:  # a bug must not stop scaling; the old snapshot stays
                log.exception("control-loop cycle failed; keeping the previous decision")
            interval = self._config()[0].scrape.intervalSeconds
            next_at += interval
            now = self._clock()
            if next_at < now:  # overran (or the clock jumped): restart the cadence
                next_at = now + interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=next_at - now)
