"""Assembly: build every part once at startup, wire them, run until SIGTERM.

Nothing here decides anything; it only constructs (registry, HTTP client, cluster
readers, servers) and passes them in, so tests can build the same graph with fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from scaler import accounting, policy
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.accounting import Capacity
from scaler.capacity import NodeCapacityWatcher
from scaler.config import Config, InferenceService
from scaler.discovery import Discovery, StaticDiscovery
from scaler.grpc_api import ExternalScalerServicer
from scaler.grpc_decode import RejectUndecodable
from scaler.http_api import HealthServer
from scaler.kube import make_api_client
from scaler.loop import ControlLoop, LoopDeps
from scaler.metrics import ScalerMetrics
from scaler.reload import ConfigHolder
from scaler.reserve import ReserveTracker
from scaler.scrape import BearerToken, Scraper, make_client
from scaler.snapshot import Snapshots

log = logging.getLogger("scaler.app")

SERVICE_NAME = "externalscaler.ExternalScaler"


@dataclass
class Options:
    config_path: str
    grpc_port: int | None = None  # override server.grpcPort
    metrics_port: int | None = None  # override server.metricsPort
    host: str = "0.0.0.0"
    drain_seconds: float = 5.0
    reload_seconds: float = 2.0  # how often the config file is checked for changes
    # Kubernetes API client factory; the client is built only when the config needs it.
    kube_api: Callable[[], Any] | None = None


@dataclass
class Running:
    """Handles to a started scaler, for tests and the demo."""

    grpc_port: int
    metrics_port: int
    snapshots: Snapshots
    loop: ControlLoop
    holder: ConfigHolder
    metrics: ScalerMetrics
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class Scaler:
    def __init__(self, config: Config, options: Options) -> None:
        self.options = options
        self.registry = CollectorRegistry()
        self.metrics = ScalerMetrics(self.registry)
        self.holder = ConfigHolder(options.config_path, config, self.metrics)
        self.snapshots = Snapshots()
        self.stop_event = asyncio.Event()
        self.draining = False
        # Client and scraper limits are read at startup; a reload changes them on restart.
        self._client = make_client(config.scrape)
        token = config.scrape.bearerTokenFile
        self.scraper = Scraper(
            self._client,
            timeout_s=config.scrape.timeoutSeconds,
            max_concurrency=config.scrape.maxConcurrency,
            max_body_bytes=config.scrape.maxBodyBytes,
            headers=BearerToken(token).headers if token else None,
        )
        self._static = StaticDiscovery()
        self._kube_discovery: Any = None  # KubeDiscovery, built when a service needs it
        self._kube_client: Any = None
        self._node_capacity: NodeCapacityWatcher | None = None
        self._node_capacity_key: tuple[object, ...] | None = None
        # A gap longer than a few cycles is not counted as lent (we do not know it was).
        self.harvest = accounting.HarvestMeter(
            max_interval_seconds=max(60.0, 3 * config.scrape.intervalSeconds)
        )
        self.loop = ControlLoop(
            self.holder.current,
            self._discovery_for,
            self.scraper,
            self.snapshots,
            LoopDeps(
                decide=policy.decide,
                split_pool=accounting.split_pool,
                capacity=self._capacity_for,
                reserve=ReserveTracker(config.pool),
                harvest=self.harvest,
            ),
            self.metrics,
        )
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self.server: grpc.aio.Server | None = None
        self.http: HealthServer | None = None
        self._started = time.monotonic()

    def _discovery_for(self, svc: InferenceService) -> Discovery:
        if svc.targets.static is not None:
            return self._static
        if self._kube_discovery is None:
            from scaler.kube_discovery import KubeDiscovery

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
        key = (cap.nodes, cfg.pool.name)
        if self._node_capacity is None or key != self._node_capacity_key:
            if self._node_capacity is not None:  # selector changed by a reload
                self._node_capacity.stop()
            self._node_capacity = NodeCapacityWatcher(
                self._kube(), cap.nodes, pool_name=cfg.pool.name
            )
            self._node_capacity_key = key
            self._node_capacity.start()
        return self._node_capacity.current()

    def _kube(self) -> Any:
        if self._kube_client is None:
            factory = self.options.kube_api or make_api_client
            self._kube_client = factory()
        return self._kube_client

    # -- probes ---------------------------------------------------------------------
    def _live(self) -> tuple[bool, str]:
        cfg, _ = self.holder.current()
        budget = max(60.0, 10 * cfg.scrape.intervalSeconds)
        last = self.loop.last_cycle_at
        ref = last if last is not None else self._started
        age = time.monotonic() - ref
        if age > budget:
            return False, f"no control-loop cycle for {age:.0f}s (budget {budget:.0f}s)"
        return True, "control loop running"

    def _ready(self) -> tuple[bool, str]:
        if self.draining:
            return False, "draining (shutting down)"
        d = self.snapshots.latest()
        if d.seq == 0:
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
            ]
        )
        pb_grpc.add_ExternalScalerServicer_to_server(
            ExternalScalerServicer(self.snapshots, self.metrics), self.server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"{self.options.host}:{grpc_port}"
        if cfg.server.tls is not None:
            from scaler.tls import server_credentials

            creds = server_credentials(
                cfg.server.tls, lambda result: self.metrics.tls_reloads.labels(result).inc()
            )
            bound = self.server.add_secure_port(address, creds)
        else:
            bound = self.server.add_insecure_port(address)
        await self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.start()
        self.http = HealthServer(
            self.options.host, metrics_port, self.registry, self._live, self._ready
        )
        self.http.start()

        # First cycle before declaring ready: KEDA gets answers from real data only.
        await self.loop.run_once()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        tasks = [
            asyncio.create_task(self._run_loop(), name="control-loop"),
            asyncio.create_task(
                self.holder.watch(self.stop_event, self.options.reload_seconds), name="config-watch"
            ),
        ]
        log.info(
            "serving pool %s: gRPC on %s, metrics on :%d",
            cfg.pool.name,
            address.replace(str(grpc_port), str(bound)),
            self.http.port,
        )
        return Running(
            bound,
            self.http.port,
            self.snapshots,
            self.loop,
            self.holder,
            self.metrics,
            self.stop_event,
            tasks,
        )

    async def _run_loop(self) -> None:
        # The first cycle already ran in start(); wait one interval before the next.
        cfg, _ = self.holder.current()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), cfg.scrape.intervalSeconds)
        await self.loop.run(self.stop_event)

    async def shutdown(self, running: Running) -> None:
        """SIGTERM: not-serving first (probes and KEDA move away), drain, then exit."""
        self.draining = True
        await self.health.enter_graceful_shutdown()
        self.stop_event.set()
        if self.server is not None:
            await self.server.stop(self.options.drain_seconds)
        for t in running.tasks:
            t.cancel()
        await asyncio.gather(*running.tasks, return_exceptions=True)
        await self.close()
        log.info("stopped cleanly")

    async def close(self) -> None:
        """Release clients and watchers (also for one-shot use such as `explain`)."""
        await self._client.aclose()
        if self._node_capacity is not None:
            self._node_capacity.stop()
        if self._kube_discovery is not None:
            self._kube_discovery.close()
        if self.http is not None:
            self.http.stop()


async def serve(config: Config, options: Options) -> int:
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
