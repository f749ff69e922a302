"""`gpu-pool-scaler demo`: the whole system on one machine, on loopback.

    simulated requests ─► simulated vLLM replicas (bench.sim model), each serving /metrics
                          over real HTTP ─► the real scaler (scaler.app.Scaler) scrapes them
    KEDA-like driver ─► real gRPC calls to the scaler ─► simulated Deployment / ScaledJob
                          (cold start, priority preemption) ─► pods the router sends to

Time is compressed: a day of trace time runs in `--day-seconds` real seconds, and every
interval of the generated pool config (scrape, stabilization, cold start) and of the KEDA
driver (polling) is compressed by the same factor, with a floor of `MIN_PERIOD_S` real
seconds for the periodic loops (scrape and polling) so that two CPU cores keep up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import io
import json
import logging
import math
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.sim.kube import JobState, ResearchClassSpec
from bench.sim.profile import ReplicaSpec
from bench.sim.scenario import DEFAULT_CLASSES
from bench.sim.workload import DAY, TRACES, load_curve, make_workload
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.app import Options, Running, Scaler
from scaler.config import load_config
from scaler.demo.cluster import DemoCluster, InfReplica, RepState
from scaler.demo.engine_http import EngineServer
from scaler.demo.keda import KedaDriver, ScaledJob, ScaledObject
from scaler.demo.view import ClassRow, Frame, plain_line, plot_pool, render, summary_table
from scaler.demo.world import SloTracker, World

log = logging.getLogger("scaler.demo")

SERVICE = "chat"
NAMESPACE = "serving"
MIN_PERIOD_S = 0.4  # floor of the scrape and polling periods (real seconds)
TICK_S = 0.05  # real seconds between simulation advances
# At most this much simulation work at once: scrapes of the replicas' /metrics are served
# by the same event loop and must answer well within the scrape timeout.
CHUNK_S = 0.01


@dataclass(frozen=True)
class ReplicaCapacity:
    per_replica_rps: float  # req/s one replica serves with 99 % of TTFTs within the SLO
    mean_tokens: float  # prompt + output tokens per request


# bench.sim.scenario.calibrate(Scenario(), "conv"): Llama-3-70B on 4 × A100, conversation
# lengths, TTFT SLO 2 s, 14 replicas → 2.47 req/s per replica (99.0 %), 1395 tokens/request.
DEFAULT_CAPACITY = ReplicaCapacity(2.47, 1395.0)
# KEDA and chart defaults, in trace seconds (DESIGN.md; charts/gpu-pool-scaler/values.yaml).
SO_POLL_S = 15.0
SJ_POLL_S = 30.0
SCRAPE_S = 5.0
STABILIZATION_S = 300.0
STEP_S = 60.0
GRACE_S = 600.0  # research pods' terminationGracePeriodSeconds (the chart's default)
RESEARCH_STARTUP_S = 60.0  # image pull, start, load the checkpoint (bench default)
GPUS_PER_NODE = 8
# The bench's thresholds for our policy: queue and KV as in DESIGN.md's example, plus
# token throughput at this share of a replica's calibrated capacity.
THROUGHPUT_TARGET_FRACTION = 0.9
WEEKDAY = {"azure-code-week": 3, "azure-conv-week": 1}  # a Monday of each trace


@dataclass(frozen=True)
class Params:
    day_seconds: float
    hours: float
    start_hour: float
    pool_gpus: int
    gpus_per_replica: int
    reserve_gpus: int
    trace: str
    lengths: str
    peak_rps: float
    capacity: ReplicaCapacity
    seed: int
    slo_ttft_s: float
    live: bool
    out: Path

    @property
    def compression(self) -> float:
        return DAY / self.day_seconds

    @property
    def max_replicas(self) -> int:
        return max(1, (self.pool_gpus - self.reserve_gpus) // self.gpus_per_replica)

    def real(self, trace_seconds: float, floor: float = 0.0) -> float:
        """A trace-time interval in real seconds."""
        return max(trace_seconds / self.compression, floor)


def parse_args(argv: list[str]) -> Params:
    p = argparse.ArgumentParser(
        prog="gpu-pool-scaler demo",
        description="A simulated GPU pool on loopback, scaled by the real scaler through "
        "its gRPC API, under a compressed day of a public trace.",
    )
    p.add_argument("--day-seconds", type=float, default=150.0, help="real seconds per day")
    p.add_argument("--hours", type=float, default=24.0, help="trace hours to simulate")
    p.add_argument("--start-hour", type=float, default=0.0, help="hour of day to start at")
    p.add_argument("--pool-gpus", type=int, default=64)
    p.add_argument("--gpus-per-replica", type=int, default=4, choices=(1, 2, 4, 8))
    p.add_argument("--reserve-gpus", type=int, default=4)
    p.add_argument("--trace", default="azure-code-week", choices=sorted(TRACES))
    p.add_argument(
        "--lengths",
        default="conv",
        choices=("conv", "code"),
        help="token lengths from the Azure 2023 trace (default conv; the rate curve "
        "comes from --trace)",
    )
    p.add_argument(
        "--peak-rps",
        type=float,
        default=None,
        help="peak request rate (default: 80 %% of the pool at the replica's calibrated capacity)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo-ttft", type=float, default=2.0, help="TTFT SLO in seconds")
    p.add_argument("--no-live", action="store_true", help="plain log lines, no live view")
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory")
    a = p.parse_args(argv)
    if a.day_seconds <= 0 or not 0 < a.hours <= 24 * 6:
        p.error("--day-seconds must be > 0 and --hours in (0, 144]")
    if a.pool_gpus < a.reserve_gpus + a.gpus_per_replica:
        p.error("--pool-gpus must hold the reserve and at least one replica")
    max_rep = max(1, (a.pool_gpus - a.reserve_gpus) // a.gpus_per_replica)
    capacity = replica_capacity(a.gpus_per_replica, a.lengths, a.slo_ttft, a.seed)
    peak = a.peak_rps if a.peak_rps is not None else 0.8 * max_rep * capacity.per_replica_rps
    return Params(
        day_seconds=a.day_seconds,
        hours=a.hours,
        start_hour=a.start_hour,
        pool_gpus=a.pool_gpus,
        gpus_per_replica=a.gpus_per_replica,
        reserve_gpus=a.reserve_gpus,
        trace=a.trace,
        lengths=a.lengths,
        peak_rps=peak,
        capacity=capacity,
        seed=a.seed,
        slo_ttft_s=a.slo_ttft,
        live=not a.no_live,
        out=a.out,
    )


def replica_capacity(
    gpus_per_replica: int, lengths: str, slo_ttft_s: float, seed: int
) -> ReplicaCapacity:
    """Requests/s a replica serves within the SLO: the bench's calibration (cached for the
    default shape; a few seconds otherwise)."""
    if (gpus_per_replica, lengths, slo_ttft_s) == (4, "conv", 2.0):
        return DEFAULT_CAPACITY
    from bench.sim.scenario import Scenario, calibrate

    print(f"calibrating one replica ({gpus_per_replica} GPUs, {lengths} lengths)…", flush=True)
    scn = Scenario(gpus_per_replica=gpus_per_replica, slo_ttft_s=slo_ttft_s, seed=seed)
    cal = calibrate(scn, lengths)
    return ReplicaCapacity(cal.per_replica_rps, cal.mean_tokens)


def thresholds(p: Params) -> dict[str, float]:
    """The scaler reads counters per real second: a token rate threshold is compressed too."""
    tps = THROUGHPUT_TARGET_FRACTION * p.capacity.per_replica_rps * p.capacity.mean_tokens
    return {
        "waitingPerReplica": 5,
        "kvCacheUsage": 0.8,
        "tokensPerSecondPerReplica": round(tps * p.compression),
    }


def research_classes() -> tuple[ResearchClassSpec, ...]:
    """The bench's research classes: eval (1 GPU), finetune (4), pretrain (8)."""
    return DEFAULT_CLASSES


def pool_config(p: Params, targets: list[str], cold_start_s: float) -> dict[str, object]:
    """The scaler's config (DESIGN.md schema) with every interval compressed."""
    scrape = p.real(SCRAPE_S, MIN_PERIOD_S)
    return {
        "pool": {
            "name": "demo-pool",
            "capacity": {"gpus": p.pool_gpus},
            "reserveGPUs": p.reserve_gpus,
        },
        "scrape": {
            "intervalSeconds": round(scrape, 4),
            "timeoutSeconds": round(0.8 * scrape, 4),
            "staleAfterSeconds": round(4 * scrape, 4),
        },
        "inference": [
            {
                "name": SERVICE,
                "namespace": NAMESPACE,
                "engine": "vllm",
                "gpusPerReplica": p.gpus_per_replica,
                "minReplicas": 1,
                "maxReplicas": p.max_replicas,
                "targets": {"static": list(targets)},
                "thresholds": thresholds(p),
                # At least 3 / 1 scrape cycles: a window shorter than a cycle holds nothing.
                "scaleDown": {
                    "stabilizationSeconds": round(max(p.real(STABILIZATION_S), 3 * scrape), 4),
                    "stepSeconds": round(max(p.real(STEP_S), scrape), 4),
                    "maxStepReplicas": 1,
                },
                "coldStartSeconds": round(p.real(cold_start_s), 4),
            }
        ],
        "research": [
            {"name": c.name, "gpusPerJob": c.gpus, "weight": c.weight, "maxJobs": c.max_jobs}
            for c in research_classes()
        ],
    }


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

    def __init__(self, world: World, config: ConfigFile) -> None:
        self._world = world
        self._config = config

    def hpa(self, service: str, value: float, target: float, *, why: str) -> None:
        w = self._world
        assert service == w.cluster.service
        draining = w.cluster.hpa_sync(value, target, w.now, why=why)
        w.drain(draining)
        for rep in draining:
            if rep.address in self._config.targets:
                self._config.targets.remove(rep.address)
                self._config.dirty = True

    def scaled_job(self, research_class: str, metric: float) -> None:
        self._world.cluster.scaled_job_poll(research_class, metric, self._world.now)


@dataclass
class Demo:
    p: Params
    world: World
    config: ConfigFile
    servers: dict[int, EngineServer]  # id(replica) -> its /metrics server
    tasks: set[asyncio.Task[None]]

    def on_ready(self, rep: InfReplica) -> None:
        pool = self.world.pool
        row = rep.row
        server = EngineServer.for_engine(
            lambda: pool.sample(row), self.world.spec.model_key, time.time()
        )
        rep.address = server.address
        self.servers[id(rep)] = server
        self._spawn(server.start())
        self.config.targets.append(server.address)
        self.config.dirty = True

    def on_gone(self, rep: InfReplica) -> None:
        server = self.servers.pop(id(rep), None)
        if server is not None:
            self._spawn(server.stop())
        if rep.address in self.config.targets:
            self.config.targets.remove(rep.address)
            self.config.dirty = True

    def _spawn(self, coro: object) -> None:
        assert asyncio.iscoroutine(coro)
        t: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)


def build_world(p: Params) -> World:
    spec = ReplicaSpec(tp=p.gpus_per_replica)
    curve = dataclasses.replace(load_curve(p.trace), lengths=p.lengths)
    day = WEEKDAY.get(p.trace, 0)
    duration = p.hours * 3600.0
    workload = make_workload(
        curve,
        start_s=day * DAY + p.start_hour * 3600.0,
        duration_s=duration,
        peak_rps=p.peak_rps,
        rng=np.random.default_rng(p.seed),
        max_model_len=8192,
    )
    cluster = DemoCluster(
        pool_gpus=p.pool_gpus,
        gpus_per_node=GPUS_PER_NODE,
        service=SERVICE,
        gpus_per_replica=p.gpus_per_replica,
        min_replicas=1,
        max_replicas=p.max_replicas,
        cold_start_s=spec.cold_start_s,
        classes=research_classes(),
        grace_s=GRACE_S,
        startup_s=RESEARCH_STARTUP_S,
        seed=p.seed,
    )
    # Simulation step: 2 s at the default speed; coarser when the day is compressed more
    # (the per-step cost is mostly fixed, and a scrape then spans more trace time anyway).
    dt = float(min(5, max(1, round(p.compression / 300))))
    return World(
        dt=dt,
        spec=spec,
        workload=workload,
        cluster=cluster,
        max_rows=p.pool_gpus // p.gpus_per_replica + 1,
        slo=SloTracker(p.slo_ttft_s),
    )


def frame(d: Demo, driver: KedaDriver, started: float, target_t: float) -> Frame:
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
        real_s=time.monotonic() - started,
        lag_s=max(0.0, target_t - w.now),
    )


def scaler_grpc_requests(metrics_port: int) -> int:
    """gRPC requests the scaler counted, read from its own /metrics endpoint."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:  # loopback only
        text = r.read().decode()
    total = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name.endswith("grpc_requests"):
            total += sum(s.value for s in fam.samples if s.name.endswith("_total"))
    return int(total)


async def run(p: Params, console: object | None = None) -> dict[str, object]:
    from rich.console import Console
    from rich.live import Live

    con = console if isinstance(console, Console) else Console()
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
    scaler = Scaler(
        load_config(config.path),
        Options(
            str(config.path),
            grpc_port=0,
            metrics_port=0,
            host="127.0.0.1",
            reload_seconds=scrape / 2,
            drain_seconds=0.5,
        ),
    )
    running: Running = await scaler.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.grpc_port}")
    driver = KedaDriver(
        stub=pb_grpc.ExternalScalerStub(channel),
        actuator=Actuator(world, config),
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
    started = time.monotonic()
    target = 0.0
    frames: list[str] = []
    next_frame_t = 0.0

    async def simulate() -> None:
        nonlocal target, next_frame_t
        while not stop.is_set() and world.now < end_t - 1e-9:
            target = min(end_t, (time.monotonic() - started) * p.compression)
            budget = time.perf_counter() + CHUNK_S  # then let the scaler and driver run
            while world.now + world.dt <= target and time.perf_counter() < budget:
                world.advance(target, 2)
            answer = driver.answers.get(f"vllm-{SERVICE}")
            world.desired = None if answer is None else answer.value
            config.flush()
            if world.now >= next_frame_t:  # a text capture of the view every trace hour
                cap = Console(record=True, width=80, file=io.StringIO())
                cap.print(render(frame(demo, driver, started, target)))
                frames.append(cap.export_text())
                next_frame_t += 3600.0
            behind = target - world.now >= world.dt
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.0 if behind else TICK_S)
        stop.set()

    async def show() -> None:
        if p.live:
            with Live(
                render(frame(demo, driver, started, target)),
                console=con,
                refresh_per_second=4,
                transient=False,
            ) as live:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.25)
                    live.update(render(frame(demo, driver, started, target)))
        else:
            period = max(p.real(3600.0), 0.5)  # one line per trace hour
            while not stop.is_set():
                print(plain_line(frame(demo, driver, started, target)), flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)
            print(plain_line(frame(demo, driver, started, target)), flush=True)

    try:
        await asyncio.gather(simulate(), driver.run(stop), show())
    finally:
        stop.set()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        try:
            server_side = scaler_grpc_requests(running.metrics_port)
        except OSError:
            server_side = -1
        await channel.close(None)
        await scaler.shutdown(running)
        await asyncio.gather(*(s.stop() for s in demo.servers.values()), *list(demo.tasks))
        quiet()

    summary = summarize(p, demo, driver, server_side, time.monotonic() - started, interrupted)
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


def summarize(
    p: Params,
    d: Demo,
    driver: KedaDriver,
    server_side: int,
    real_s: float,
    interrupted: bool,
) -> dict[str, object]:
    w, c = d.world, d.world.cluster
    w.slo.advance(w.log, w.now)
    ready = [r.ready for r in w.records]
    arrived = w.arrived()
    return {
        "research_gpu_hours": round(c.research_gpu_s / 3600.0, 2),
        "research_useful_gpu_hours": round(c.useful_gpu_s(w.now) / 3600.0, 2),
        "research_gpu_hours_lost": round(c.ledger.lost_gpu_s / 3600.0, 2),
        "research_jobs_created": c.jobs_created,
        "research_jobs_completed": c.jobs_done,
        "max_inference_replicas": max(ready) if ready else None,
        "min_inference_replicas": min(ready) if ready else None,
        "preemptions": c.preemptions,
        "slo_attainment": w.slo.attainment,
        "slo_ttft_seconds": p.slo_ttft_s,
        "grpc_calls": sum(driver.calls.values()),
        "grpc_calls_by_method": dict(driver.calls),
        "scaler_grpc_requests": server_side,
        "requests": arrived,
        "sim_hours": round(w.now / 3600.0, 3),
        "start_hour": p.start_hour,
        "interrupted": interrupted,
        "real_seconds": round(real_s, 1),
        "day_seconds": p.day_seconds,
        "compression": round(p.compression, 1),
        "pool_gpus": p.pool_gpus,
        "gpus_per_replica": p.gpus_per_replica,
        "reserve_gpus": p.reserve_gpus,
        "trace": p.trace,
        "lengths": p.lengths,
        "peak_rps": p.peak_rps,
        "seed": p.seed,
        "config_writes": d.config.writes,
    }


def write_outputs(p: Params, d: Demo, summary: dict[str, object], frames: list[str]) -> None:
    out = p.out
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "timeline.csv").open("w") as f:
        fields = [x.name for x in dataclasses.fields(d.world.records[0])] if d.world.records else []
        f.write(",".join(fields) + "\n")
        for r in d.world.records:
            row = dataclasses.asdict(r)
            f.write(",".join("" if row[k] is None else str(row[k]) for k in fields) + "\n")
    with (out / "events.jsonl").open("w") as f:
        for e in d.world.cluster.events:
            f.write(json.dumps(dataclasses.asdict(e)) + "\n")
    (out / "frames.txt").write_text("\n".join(frames))
    title = (
        f"{p.trace} (rate curve) with {p.lengths} lengths, peak {p.peak_rps:.0f} req/s; "
        f"{p.pool_gpus} GPUs, {p.gpus_per_replica} per replica; "
        f"{summary['research_gpu_hours']} research GPU-hours, {summary['preemptions']} preemptions"
    )
    plot_pool(d.world.records, p.pool_gpus, p.reserve_gpus, p.start_hour, out / "pool.png", title)


def main(argv: list[str]) -> int:
    from rich.console import Console

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
        "pool.yaml",
        "scaler.log",
    ):
        con.print(f"  {p.out / name}")
    if summary["interrupted"]:
        con.print("[yellow]interrupted: the summary covers the part of the day that ran[/yellow]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
