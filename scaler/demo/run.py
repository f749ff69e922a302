"""`gpu-pool-scaler demo`: the whole system on one machine, on loopback.

    simulated requests ─► simulated vLLM replicas (scaler.sim model), each serving /metrics
                          over real HTTP ─► the real scaler (scaler.app.Scaler) scrapes them
    KEDA-like driver ─► real gRPC calls to the scaler ─► simulated HPA / ScaledJob /
                          scheduler (scaler.sim.kube: cold start, priority preemption)

This module wires the parts and runs them on one event loop: the simulation advances in
small chunks paced by the compressed clock, the scaler's own tasks scrape and decide, the
driver polls, the view redraws. What is simulated and how the scaler is configured:
`scaler.demo.scenario`; what a run leaves behind: `scaler.demo.report`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml
from rich.console import Console
from rich.live import Live

from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.app import Options, Running, Scaler
from scaler.config import load_config
from scaler.demo.engine_http import EngineServer
from scaler.demo.keda import KedaDriver, ScaledJob, ScaledObject
from scaler.demo.queue import SimQueueReader
from scaler.demo.report import scaler_grpc_requests, summarize, write_outputs
from scaler.demo.scenario import (
    MIN_PERIOD_S,
    NAMESPACE,
    SCRAPE_S,
    SERVICE,
    SJ_POLL_S,
    SO_POLL_S,
    Params,
    build_world,
    parse_args,
    pool_config,
    research_classes,
)
from scaler.demo.view import ClassRow, Frame, plain_line, render, summary_table
from scaler.demo.world import World
from scaler.sim.kube import JobState
from scaler.sim.pods import InfReplica, RepState

TICK_S = 0.05  # real seconds between simulation advances
# At most this much simulation work at once: scrapes of the replicas' /metrics are served
# by the same event loop and must answer well within the scrape timeout.
CHUNK_S = 0.01


@dataclass
class PacedClock:
    """Trace time = (real time − start − slip) × compression.

    When the simulation falls behind by more than `max_behind_s` real seconds (CPU busy),
    the clock slips and the day stretches: catching up in a burst would show the scaler
    counters growing faster than the compressed clock allows (inflated token rates)."""

    compression: float
    start: float
    max_behind_s: float = 0.25
    slip_s: float = 0.0  # real seconds the day has been stretched by

    def target(self, sim_now: float) -> float:
        t = (time.monotonic() - self.start - self.slip_s) * self.compression
        limit = self.max_behind_s * self.compression
        if t - sim_now > limit:
            self.slip_s += (t - sim_now - limit) / self.compression
            t = sim_now + limit
        return t


class ConfigFile:
    """The scaler's config file; rewritten (atomically) when the replica set changes, which
    the scaler's reload picks up: the same path a ConfigMap update takes."""

    def __init__(self, path: Path, build: Callable[[list[str]], dict[str, object]]) -> None:
        self.path = path
        self._build = build
        self.targets: list[str] = []
        self.dirty = True
        self.writes = 0

    def flush(self) -> None:
        if not self.dirty:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self._build(self.targets), sort_keys=False))
        os.replace(tmp, self.path)
        self.dirty = False
        self.writes += 1


class Actuator:
    """Where KEDA's answers land: the HPA and ScaledJob controller of the simulated cluster
    (see keda.Actuator). A scale-down's draining replicas leave the target list at once,
    as a terminating pod leaves its Service's endpoints."""

    def __init__(self, world: World, config: ConfigFile, servers: dict[int, EngineServer]) -> None:
        self._world = world
        self._config = config
        self._servers = servers

    def hpa(self, service: str, value: float, target: float, *, why: str) -> None:
        w = self._world
        assert service == w.cluster.service
        draining = w.cluster.hpa_sync(value, target, w.now, why=why)
        w.drain(draining)
        for rep in draining:
            server = self._servers.get(rep.uid)
            if server is not None and server.address in self._config.targets:
                self._config.targets.remove(server.address)
                self._config.dirty = True

    def scaled_job(self, research_class: str, metric: float) -> None:
        self._world.cluster.scaled_job_poll(research_class, metric, self._world.now)


@dataclass
class Demo:
    p: Params
    world: World
    config: ConfigFile
    servers: dict[int, EngineServer]  # replica uid -> its /metrics server
    tasks: set[asyncio.Task[None]]

    def on_ready(self, rep: InfReplica) -> None:
        pool = self.world.pool
        row = rep.row
        server = EngineServer.for_engine(
            lambda: pool.sample(row), self.world.spec.model_key, time.time()
        )
        self.servers[rep.uid] = server
        self._spawn(server.start())
        self.config.targets.append(server.address)
        self.config.dirty = True

    def on_gone(self, rep: InfReplica) -> None:
        server = self.servers.pop(rep.uid, None)
        if server is None:
            return
        self._spawn(server.stop())
        if server.address in self.config.targets:
            self.config.targets.remove(server.address)
            self.config.dirty = True

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)


def frame(d: Demo, driver: KedaDriver, clock: PacedClock) -> Frame:
    w, c, p = d.world, d.world.cluster, d.p
    so = driver.answers.get(f"vllm-{SERVICE}")
    classes = tuple(
        ClassRow(
            cs.name,
            cs.gpus,
            driver.answers[f"research-{cs.name}"].value
            if f"research-{cs.name}" in driver.answers
            else None,
            c.jobs_in(JobState.RUNNING, cs.name),
            c.jobs_in(JobState.PENDING, cs.name),
            c.jobs_in(JobState.EVICTED, cs.name),
        )
        for cs in c.classes.values()
    )
    w.slo.advance(w.log, w.now)
    return Frame(
        clock=World.hour(p.start_hour * 3600.0 + w.now),
        day_fraction=w.now / (p.hours * 3600.0),
        rps=w.rate_now(),
        waiting=w.waiting(),
        service=f"{NAMESPACE}/{SERVICE}",
        ready=c.count(RepState.READY),
        starting=c.count(RepState.LOADING),
        pending=c.count(RepState.PENDING),
        draining=c.count(RepState.DRAINING),
        desired=None if so is None else so.value,
        scaler_error=None if so is None else so.error,
        classes=classes,
        capacity=p.pool_gpus,
        reserve=p.reserve_gpus,
        inference_gpus=c.inference_gpus(),
        research_gpus=c.research_gpus(JobState.RUNNING),
        terminating_gpus=c.research_gpus(JobState.EVICTED),
        preemptions=c.preemptions,
        research_gpu_hours=c.research_gpu_s / 3600.0,
        slo=w.slo.attainment,
        slo_ttft_s=p.slo_ttft_s,
        grpc_calls=sum(driver.calls.values()),
        real_s=time.monotonic() - clock.start,
        stretched_s=clock.slip_s,
        queue=w.queue_counts(),
    )


async def run(p: Params, console: Console | None = None) -> dict[str, object]:
    con = console or Console()
    p.out.mkdir(parents=True, exist_ok=True)
    world = build_world(p)
    cold = world.spec.cold_start_s
    config = ConfigFile(p.out / "pool.yaml", lambda t: pool_config(p, t, cold))
    demo = Demo(p, world, config, {}, set())
    world.on_ready, world.on_gone = demo.on_ready, demo.on_gone
    quiet = _scaler_log_to(p.out / "scaler.log")

    # Yesterday's Deployment: enough replicas for the rate at the start.
    rate0 = float(world.workload.rate_at(0.0))
    n0 = max(1, min(p.max_replicas, math.ceil(rate0 / (0.8 * p.capacity.per_replica_rps))))
    for rep in world.cluster.start_with(n0, 0.0):
        world.start_replica(rep)
    await asyncio.gather(*list(demo.tasks))
    config.flush()

    scrape = p.real(SCRAPE_S, MIN_PERIOD_S)
    queue = world.cluster.queue
    reader = SimQueueReader()
    if queue is not None:
        reader.publish(queue)
    scaler = Scaler(
        load_config(config.path),
        Options(
            str(config.path),
            grpc_port=0,
            metrics_port=0,
            host="127.0.0.1",
            reload_seconds=scrape / 2,
            drain_seconds=0.5,
            queue_reader=reader,
        ),
    )
    running: Running = await scaler.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.grpc_port}")
    driver = KedaDriver(
        stub=pb_grpc.ExternalScalerStub(channel),
        actuator=Actuator(world, config, demo.servers),
        scaled_objects=[ScaledObject(f"vllm-{SERVICE}", NAMESPACE, SERVICE)],
        scaled_jobs=[
            ScaledJob(f"research-{c.name}", "research", c.name) for c in research_classes()
        ],
        so_interval_s=p.real(SO_POLL_S, MIN_PERIOD_S),
        sj_interval_s=p.real(SJ_POLL_S, MIN_PERIOD_S),
        scaler_address=f"127.0.0.1:{running.grpc_port}",
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    end_t = p.hours * 3600.0
    clock = PacedClock(p.compression, time.monotonic())
    frames: list[str] = []
    next_frame_t = 0.0

    async def simulate() -> None:
        nonlocal next_frame_t
        while not stop.is_set() and world.now < end_t - 1e-9:
            target = min(end_t, clock.target(world.now))
            budget = time.perf_counter() + CHUNK_S  # then let the scaler and driver run
            while world.now + world.dt <= target and time.perf_counter() < budget:
                world.advance(target, 2)
            if queue is not None:
                reader.publish(queue)
            answer = driver.answers.get(f"vllm-{SERVICE}")
            world.desired = None if answer is None else answer.value
            config.flush()
            if world.now >= next_frame_t:  # a text capture of the view every trace hour
                cap = Console(record=True, width=80, file=io.StringIO())
                cap.print(render(frame(demo, driver, clock)))
                frames.append(cap.export_text())
                next_frame_t += 3600.0
            behind = target - world.now >= world.dt
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.0 if behind else TICK_S)
        stop.set()

    async def show() -> None:
        if p.live:
            with Live(
                render(frame(demo, driver, clock)),
                console=con,
                refresh_per_second=4,
                transient=False,
            ) as live:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.25)
                    live.update(render(frame(demo, driver, clock)))
        else:
            period = max(p.real(3600.0), 0.5)  # one line per trace hour
            while not stop.is_set():
                print(plain_line(frame(demo, driver, clock)), flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)
            print(plain_line(frame(demo, driver, clock)), flush=True)

    try:
        await asyncio.gather(simulate(), driver.run(stop), show())
    finally:
        stop.set()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        server_side: int | None = None  # unknown if the scaler's /metrics did not answer
        with contextlib.suppress(httpx.HTTPError):
            server_side = await scaler_grpc_requests(running.metrics_port)
        await channel.close(None)
        await scaler.shutdown(running)
        await asyncio.gather(*(s.stop() for s in demo.servers.values()), *list(demo.tasks))
        quiet()

    summary = summarize(p, demo, driver, server_side, time.monotonic() - clock.start, interrupted)
    summary["stretched_seconds"] = round(clock.slip_s, 1)
    write_outputs(p, demo, summary, frames)
    return summary


def _scaler_log_to(path: Path) -> Callable[[], None]:
    """The scaler's own log goes to a file: its INFO lines would tear the live view."""
    from scaler.logs import TextFormatter

    lg = logging.getLogger("scaler")
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(TextFormatter())
    old = (lg.propagate, lg.level)
    lg.addHandler(handler)
    lg.propagate = False
    lg.setLevel(logging.INFO)

    def restore() -> None:
        lg.removeHandler(handler)
        handler.close()
        lg.propagate, lg.level = old

    return restore


def main(argv: list[str]) -> int:
    p = parse_args(argv)
    con = Console()
    summary = asyncio.run(run(p, con))
    con.print()
    con.print(summary_table(summary))
    for name in (
        "summary.json",
        "pool.png",
        "timeline.csv",
        "events.jsonl",
        "frames.txt",
        *(["queue.csv"] if summary.get("research_queue") else []),
        "pool.yaml",
        "scaler.log",
    ):
        con.print(f"  {p.out / name}")
    if summary["interrupted"]:
        con.print("[yellow]interrupted: the summary covers the part of the day that ran[/yellow]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
