"""Assembly: build every part once at startup, wire them, run until SIGTERM.

Nothing here decides anything; it only constructs (registry, HTTP client, cluster
readers, servers) and passes them in, so tests can build the same graph with fakes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from kubernetes.client import AutoscalingV2Api
from prometheus_client import CollectorRegistry

from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.config import Config, InferenceService, ScrapeConfig
from scaler.core import accounting
from scaler.core.accounting import Capacity
from scaler.ingest.capacity import NodeCapacityWatcher, research_watch_namespaces
from scaler.ingest.discovery import Discovery, StaticDiscovery
from scaler.ingest.hpa import KEDA_HPA_SELECTOR, HpaChecker, ignored_by_tolerance
from scaler.ingest.kube import make_api_client
from scaler.ingest.scrape import Scraper, ScraperFollowingConfig, make_client
from scaler.ingest.scrape_worker import ProcessScraper
from scaler.ingest.state_store import ConfigMapStateStore, FileStateStore, StateStore
from scaler.loop import ControlLoop, LoopDeps, ScrapeAll
from scaler.reload import ConfigHolder
from scaler.research.depth import QueueReader, RedisQueueDepth
from scaler.serve.grpc_api import ExternalScalerServicer
from scaler.serve.grpc_decode import RejectUndecodable
from scaler.serve.http_api import HealthServer
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots

log = logging.getLogger("scaler.app")

SERVICE_NAME = "externalscaler.ExternalScaler"

# The GIL switch interval `serve` sets (Python's default is 5 ms). Scraping and parsing
# run in a worker process (scaler/ingest/scrape_worker.py); the control thread still holds the
# GIL for ~30 ms per cycle (results, policy, accounting), and a gRPC call that needs the
# GIL meanwhile waits up to this long per hand-over, several times per call. Measured in
# docs/operations.md#load (the thread alone, without the worker, did not meet the target).
GIL_SWITCH_INTERVAL_S = 0.0005


@dataclass
class Options:
    config_path: str
    grpc_port: int | None = None  # override server.grpcPort
    metrics_port: int | None = None  # override server.metricsPort
    host: str | None = None  # override server.listenAddress
    drain_seconds: float = 5.0
    reload_seconds: float = 2.0  # how often the config file is checked for changes
    # Kubernetes API client factory; the client is built only when the config needs it.
    kube_api: Callable[[], Any] | None = None
    # Scrape and parse in a worker process (see scaler/ingest/scrape_worker.py); False: in the
    # control thread (one process, e.g. for a one-shot `explain`).
    scrape_in_worker: bool = True
    # Save the policy memory to server.stateFile / stateConfigMap (`explain` only reads it).
    write_state: bool = True
    # Reads the work queues of research classes with a `queue` (default: Redis, from each
    # class's queue.urlFile); the demo passes its simulated queue.
    queue_reader: QueueReader | None = None


@dataclass
class Running:
    """Handles to a started scaler, for tests and the demo."""

    grpc_port: int
    metrics_port: int
    snapshots: Snapshots
    loop: ControlLoop
    holder: ConfigHolder
    metrics: ScalerMetrics


class Scaler:
    def __init__(self, config: Config, options: Options) -> None:
        self.options = options
        self.registry = CollectorRegistry()
        self.snapshots = Snapshots()
        self.metrics = ScalerMetrics(self.registry, self.snapshots.latest)
        self.holder = ConfigHolder(options.config_path, config, self.metrics)
        self.draining = False
        # True once gRPC health says SERVING: /readyz never runs ahead of the gRPC probe.
        self.serving = False
        self._close_scraper: Callable[[], Awaitable[None]] | None = None
        self._scraper: ScraperFollowingConfig | None = None
        self._loop: ControlLoop | None = None
        self._loop_lock = threading.Lock()
        # The control thread (serve): its event loop and main task, for shutdown.
        self._control: threading.Thread | None = None
        self._control_loop: asyncio.AbstractEventLoop | None = None
        self._control_task: asyncio.Task[None] | None = None
        self._static = StaticDiscovery()
        self._kube_discovery: Any = None  # KubeDiscovery, built when a service needs it
        self._kube_client: Any = None
        self._kube_lock = threading.Lock()
        self._node_capacity: NodeCapacityWatcher | None = None
        self._node_capacity_key: tuple[object, ...] | None = None
        self._hpa: HpaChecker | None = None
        self._queue_depth: RedisQueueDepth | None = None
        self._hpa_period = 0.0
        # A gap longer than a few cycles is not counted as lent (we do not know it was).
        self.harvest = accounting.HarvestMeter(
            max_interval_seconds=max(60.0, 3 * config.scrape.intervalSeconds)
        )
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.http: HealthServer | None = None
        self._started = time.monotonic()

    @property
    def loop(self) -> ControlLoop:
        """The control loop, built on first use by the thread that runs it: the httpx
        client's connections belong to that thread's event loop (`serve`: the control
        thread; `explain`: the caller's)."""
        with self._loop_lock:
            if self._loop is None:
                self._loop = self._build_loop()
            return self._loop

    def _build_loop(self) -> ControlLoop:
        scraper = ScraperFollowingConfig(
            lambda: self.holder.current()[0].scrape, self._build_scraper
        )
        self._close_scraper = scraper.aclose
        self._scraper = scraper
        return ControlLoop(
            self.holder.current,
            self._discovery_for,
            scraper,
            self.snapshots,
            LoopDeps(
                capacity=self._capacity_for,
                harvest=self.harvest,
                state=self._state_store(),
                save_state=self.options.write_state,
                queue=self.options.queue_reader or self._redis_queues(),
            ),
            self.metrics,
        )

    def _redis_queues(self) -> QueueReader:
        self._queue_depth = RedisQueueDepth(
            secrets=self._read_secret, on_secret_read=self.metrics.queue_secret_reads.record
        )
        return self._queue_depth

    def _read_secret(self, namespace: str, name: str, timeout_s: float) -> dict[str, str]:
        """research[].queue.secret (called from a worker thread)."""
        from scaler.ingest.kube_secret import read_secret

        return read_secret(self._kube(), namespace, name, timeout_s)

    def _state_store(self) -> StateStore | None:
        server = self.holder.current()[0].server  # read at start; a reload does not move it
        if server.stateFile is not None:
            return FileStateStore(server.stateFile)
        if server.stateConfigMap is not None:
            return ConfigMapStateStore(self._kube(), server.stateConfigMap)
        return None

    def _build_scraper(self, cfg: ScrapeConfig) -> tuple[ScrapeAll, Callable[[], Awaitable[None]]]:
        if self.options.scrape_in_worker:
            worker = ProcessScraper(cfg)
            return worker, worker.aclose
        scraper = Scraper.from_config(make_client(cfg), cfg)
        return scraper, scraper.aclose

    def _discovery_for(self, svc: InferenceService) -> Discovery:
        if svc.targets.static is not None:
            return self._static
        if self._kube_discovery is None:
            from scaler.ingest.kube_discovery import KubeDiscovery

            self._kube_discovery = KubeDiscovery(self._kube())
        return self._kube_discovery

    def _capacity_for(self, cfg: Config) -> Capacity | None:
        cap = cfg.pool.capacity
        if cap.gpus is not None:
            if self._node_capacity is not None:  # a reload switched nodes -> static
                self._node_capacity.stop()
                self._node_capacity = self._node_capacity_key = None
            return Capacity(total_gpus=cap.gpus, source="static")
        assert cap.nodes is not None
        research = research_watch_namespaces(cfg.pool)
        key = (cap.nodes, cfg.pool.name, research)
        if self._node_capacity is None or key != self._node_capacity_key:
            if self._node_capacity is not None:  # selector changed by a reload
                self._node_capacity.stop()
            self._node_capacity = NodeCapacityWatcher(
                self._kube(), cap.nodes, pool_name=cfg.pool.name, research_namespaces=research
            )
            self._node_capacity_key = key
            self._node_capacity.start()
        return self._node_capacity.current()

    def _kube(self) -> Any:
        # Locked: the queue's Secret is read from a worker thread, the rest from the loop's.
        with self._kube_lock:
            if self._kube_client is None:
                factory = self.options.kube_api or make_api_client
                self._kube_client = factory()
            return self._kube_client

    # -- probes ---------------------------------------------------------------------
    def _live(self) -> tuple[bool, str]:
        cfg, _ = self.holder.current()
        budget = max(60.0, 10 * cfg.scrape.intervalSeconds)
        last = self._loop.last_cycle_at if self._loop is not None else None
        ref = last if last is not None else self._started
        age = time.monotonic() - ref
        if age > budget:
            return False, f"no control-loop cycle for {age:.0f}s (budget {budget:.0f}s)"
        return True, "control loop running"

    def _ready(self) -> tuple[bool, str]:
        if self.draining:
            return False, "draining (shutting down)"
        d = self.snapshots.latest()
        if d.seq == 0 or not self.serving:
            return False, "first control-loop cycle not complete"
        return True, f"decision #{d.seq}, config generation {d.config_generation}"

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> Running:
        cfg, _ = self.holder.current()
        grpc_port = (
            self.options.grpc_port if self.options.grpc_port is not None else cfg.server.grpcPort
        )
        metrics_port = (
            self.options.metrics_port
            if self.options.metrics_port is not None
            else cfg.server.metricsPort
        )
        self.server = grpc.aio.server(
            interceptors=[RejectUndecodable()],  # undecodable bytes: INVALID_ARGUMENT
            options=[
                ("grpc.max_receive_message_length", 1024 * 1024),
                ("grpc.max_concurrent_streams", 1000),
                ("grpc.so_reuseport", 0),
            ],
        )
        pb_grpc.add_ExternalScalerServicer_to_server(
            ExternalScalerServicer(
                self.snapshots,
                self.metrics,
                config=lambda: self.holder.current()[0],
                clock=time.monotonic,  # the control loop's clock (Decision.made_at)
            ),
            self.server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        host = self.options.host if self.options.host is not None else cfg.server.listenAddress
        address = f"[{host}]:{grpc_port}" if ":" in host else f"{host}:{grpc_port}"
        if cfg.server.tls is not None:
            from scaler.serve.tls import server_credentials

            creds = server_credentials(cfg.server.tls, self.metrics.tls_reloads.record)
            bound = self.server.add_secure_port(address, creds)
        else:
            bound = self.server.add_insecure_port(address)
        await self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.start()
        self.http = HealthServer(host, metrics_port, self.registry, self._live, self._ready)
        self.http.start()

        # The control loop and the config watcher get a thread and event loop of their
        # own, so that a cycle never queues in front of gRPC calls on this loop (the
        # scraping itself runs in the worker process unless `scrape_in_worker` is off).
        # First cycle before declaring ready: KEDA gets answers from real data only.
        first: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._control = threading.Thread(
            target=asyncio.run,
            args=(self._control_main(first),),
            name="control-loop",
            daemon=True,  # shutdown() joins it; a crashed caller must not hang the exit
        )
        self._control.start()
        await asyncio.wrap_future(first)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self.serving = True
        log.info(
            "serving pool %s: gRPC on %s, metrics on :%d",
            cfg.pool.name,
            address.replace(str(grpc_port), str(bound)),
            self.http.port,
        )
        return Running(bound, self.http.port, self.snapshots, self.loop, self.holder, self.metrics)

    async def _control_main(self, first: concurrent.futures.Future[None]) -> None:
        """The control thread: first cycle (reported through `first`), then cycles and
        config checks until shutdown cancels this task."""
        self._control_loop = asyncio.get_running_loop()
        self._control_task = asyncio.current_task()
        try:
            await self.loop.run_once()
            first.set_result(None)
            stop = asyncio.Event()  # never set: shutdown cancels the task
            await asyncio.gather(
                self._run_loop(stop),
                self.holder.watch(stop, self.options.reload_seconds),
                self._hpa_watch(stop),
            )
        except asyncio.CancelledError:
            pass  # shutdown
        except BaseException as e:
            if not first.done():
                first.set_exception(e)  # start() raises it
            else:
                log.exception("control thread failed")
        finally:
            if not first.done():
                first.cancel()
            await self._close_client()

    async def _run_loop(self, stop: asyncio.Event) -> None:
        # The first cycle already ran; wait one interval before the next.
        cfg, _ = self.holder.current()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), cfg.scrape.intervalSeconds)
        await self.loop.run(stop)

    # -- HPA read-back (a diagnostic: never changes a decision) --------------------------
    def _hpa_enabled(self, cfg: Config) -> bool:
        mode = cfg.server.hpaCheck
        if mode != "auto":
            return mode == "on"
        uses_kube = any(s.targets.kubernetes is not None for s in cfg.inference)
        return uses_kube or cfg.pool.capacity.nodes is not None

    def _hpa_checker_for(self, cfg: Config) -> HpaChecker:
        period = cfg.server.hpaCheckSeconds
        if self._hpa is None or self._hpa_period != period:
            api = AutoscalingV2Api(self._kube())

            def list_hpas(namespace: str) -> list[Any]:
                # Raw JSON (no model objects), as the reflectors read their lists.
                resp: Any = api.list_namespaced_horizontal_pod_autoscaler(
                    namespace,
                    label_selector=KEDA_HPA_SELECTOR,
                    _preload_content=False,
                    _request_timeout=10,
                )
                try:
                    return list(json.loads(resp.data).get("items") or [])
                finally:
                    resp.release_conn()

            self._hpa, self._hpa_period = HpaChecker(list_hpas, period_s=period), period
        return self._hpa

    async def _hpa_watch(self, stop: asyncio.Event) -> None:
        """Now and then, read back the HPAs KEDA built and warn (log + metric) while their
        tolerance swallows our answers (scaler/ingest/hpa.py)."""
        streak: dict[str, int] = {}  # service -> consecutive reads that found it ignored
        while not stop.is_set():
            cfg, _ = self.holder.current()
            if self._hpa_enabled(cfg):
                checker = self._hpa_checker_for(cfg)
                namespaces = {s.namespace for s in cfg.inference}
                if await asyncio.to_thread(checker.poll, namespaces):
                    self._report_hpas(checker, streak)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    def _report_hpas(self, checker: HpaChecker, streak: dict[str, int]) -> None:
        decision = self.snapshots.latest()
        self.metrics.hpa_ignoring.clear()
        self.metrics.hpa_tolerance.clear()
        for service, view in checker.views.items():
            self.metrics.hpa_tolerance.labels(service, "up").set(view.tolerance_up)
            self.metrics.hpa_tolerance.labels(service, "down").set(view.tolerance_down)
            ours = decision.services.get(service)
            why = ignored_by_tolerance(ours.desired if ours else None, view)
            streak[service] = streak.get(service, 0) + 1 if why else 0
            # Twice in a row: the HPA has had at least one sync period to follow us. The log
            # line goes first: whoever sees the gauge at 1 finds the reason already logged.
            if streak[service] == 2:
                log.warning("%s", why, extra={"service": service, "namespace": view.namespace})
            self.metrics.hpa_ignoring.labels(service).set(1 if streak[service] >= 2 else 0)

    def _stop_control(self) -> None:
        loop, task = self._control_loop, self._control_task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop already finished
                loop.call_soon_threadsafe(task.cancel)

    async def shutdown(self, running: Running) -> None:
        """SIGTERM: not-serving first (probes and KEDA move away), drain, then exit."""
        self.draining = True
        await self.health.enter_graceful_shutdown()
        # No further cycles (a cycle in flight is abandoned; the last decision stays and
        # the draining calls are answered from it).
        self._stop_control()
        if self.server is not None:
            await self.server.stop(self.options.drain_seconds)
        if self._control is not None:
            await asyncio.to_thread(self._control.join, 10.0)
            if self._control.is_alive():
                log.warning("control thread did not stop within 10 s")
            elif self._loop is not None:
                await self._loop.save_state()  # the latest memory, for the next process
        await self.close()
        log.info("stopped cleanly")

    async def close(self) -> None:
        """Release clients and watchers (also for one-shot use such as `explain`)."""
        if self._control is None:  # one-shot use: the client lives on the caller's loop
            await self._close_client()
        if self._node_capacity is not None:
            self._node_capacity.stop()
        if self._kube_discovery is not None:
            self._kube_discovery.close()
        if self._queue_depth is not None:
            self._queue_depth.close()
        if self.http is not None:
            self.http.stop()

    async def _close_client(self) -> None:
        close, self._close_scraper = self._close_scraper, None
        if close is not None:
            await close()


async def serve(config: Config, options: Options) -> int:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # why: see GIL_SWITCH_INTERVAL_S
    scaler = Scaler(config, options)
    running = await scaler.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("signal received: draining for up to %.0fs", options.drain_seconds)
    await scaler.shutdown(running)
    return 0
