"""Load bench: the real scaler (`gpu-pool-scaler serve`, a subprocess) against N loopback
vLLM targets and M KEDA-like gRPC clients, each in processes of their own.

    python -m bench.load [--targets 500] [--interval 5] [--objects 200] [--rps 1000]
                         [--streams 100] [--scrape-seconds 60] [--grpc-seconds 60]
                         [--client-procs 2] [--out bench/results/load-YYYYMMDD-HHMM.md]

Processes (so that the scaler's own CPU and RSS, with its scrape worker's, can be read from
/proc):
* targets: one asyncio process serving N HTTP /metrics endpoints, each the real vLLM
  0.32.0 capture (tests/data/vllm-0.32.0-cpu) with its load gauges and token counters changing
  over time (a slow wave per target, counters that only grow);
* the scaler: `python -m scaler serve` with a generated pool config (N/5 inference
  services of 5 replicas each, as many research classes);
* clients: `--client-procs` processes playing M ScaledObjects/ScaledJobs the way KEDA
  does, per object and period: GetMetricSpec + GetMetrics + IsActive (KEDA's poll), then
  GetMetricSpec + GetMetrics again (the HPA path), at a period that gives `--rps` in all;
  plus `--streams` open StreamIsActive streams (external-push).

Phase 1 (scrape only) measures the control loop: CPU share of the scaler process, cycle
wall time (the scaler's own histogram), CPU seconds per cycle. Phase 2 adds the gRPC
load: client-observed GetMetrics latency p50/p99/max, RPS served, CPU. RSS is the peak
(VmHWM). Afterwards the streams are dropped and the open-stream gauge must return to 0.
Every figure goes into a Markdown file with the command and the machine; misses are
marked MISS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench import CAPTURES

REPO = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


# -- targets: N vLLM /metrics endpoints in one process ------------------------------------

# The lines rewritten per scrape (the rest of the ~50 KB capture is served as captured).
_DYNAMIC = {
    "vllm:num_requests_waiting{": "waiting",
    "vllm:num_requests_running{": "running",
    "vllm:kv_cache_usage_perc{": "kv",
    "vllm:prompt_tokens_total{": "prompt",
    "vllm:generation_tokens_total{": "generation",
}


def body_template() -> list[str | tuple[str, str]]:
    """The real capture split into literal text and (field, line prefix) slots."""
    text = (CAPTURES / "metrics_after_load.txt").read_text()
    parts: list[str | tuple[str, str]] = []
    literal: list[str] = []
    for line in text.splitlines(keepends=True):
        key = next((k for k in _DYNAMIC if line.startswith(k)), None)
        if key is None:
            literal.append(line)
            continue
        parts.append("".join(literal))
        literal = []
        parts.append((_DYNAMIC[key], line[: line.index("}") + 1] + " "))
    parts.append("".join(literal))
    return parts


@dataclass
class TargetLoad:
    """One replica's load: a slow wave with its own phase; counters only grow."""

    phase: float
    period_s: float
    peak_waiting: float
    prompt: float = 0.0
    generation: float = 0.0
    last: float = field(default_factory=time.monotonic)

    def values(self, now: float) -> dict[str, float]:
        x = 0.5 + 0.5 * math.sin(2 * math.pi * now / self.period_s + self.phase)
        running = round(8 * min(1.0, 1.5 * x))
        waiting = max(0.0, round(self.peak_waiting * x - self.peak_waiting / 3))
        dt = max(0.0, now - self.last)
        self.last = now
        self.prompt += running * 40 * dt
        self.generation += running * 25 * dt
        return {
            "waiting": waiting,
            "running": running,
            "kv": round(0.9 * x, 4),
            "prompt": round(self.prompt),
            "generation": round(self.generation),
        }


def render(template: list[str | tuple[str, str]], v: dict[str, float]) -> bytes:
    out = []
    for p in template:
        if isinstance(p, str):
            out.append(p)
        else:
            out.append(f"{p[1]}{v[p[0]]}\n")
    return "".join(out).encode()


class _Target(asyncio.Protocol):
    def __init__(self, load: TargetLoad, template: list[str | tuple[str, str]]) -> None:
        self.load, self.template = load, template
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            _, self.buf = self.buf.split(b"\r\n\r\n", 1)
            body = render(self.template, self.load.values(time.monotonic()))
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            assert self.transport is not None
            self.transport.write(head.encode() + body)


async def serve_targets(n: int, seed: int) -> None:
    rng = random.Random(seed)
    template = body_template()
    loop = asyncio.get_running_loop()
    addresses = []
    servers = []
    for _ in range(n):
        load = TargetLoad(rng.uniform(0, 2 * math.pi), rng.uniform(60, 300), rng.uniform(5, 40))
        srv = await loop.create_server(partial(_Target, load, template), "127.0.0.1", 0)
        servers.append(srv)
        addresses.append(f"127.0.0.1:{srv.sockets[0].getsockname()[1]}")
    print(json.dumps(addresses), flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


# -- clients: M KEDA-like objects ---------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]


async def run_clients(
    port: int, objects: list[dict[str, str]], rps: float, seconds: float, streams: int
) -> dict[str, Any]:
    import grpc

    from scaler._proto import externalscaler_pb2 as pb
    from scaler._proto import externalscaler_pb2_grpc as pb_grpc

    calls_per_period = 5  # KEDA poll (spec, metrics, active) + HPA path (spec, metrics)
    period = len(objects) * calls_per_period / rps
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ExternalScalerStub(channel)
    latencies: list[float] = []
    sent_at: list[float] = []  # wall time of each GetMetrics, to place it against cycles
    counts = {"ok": 0, "errors": 0, "late_periods": 0, "stream_messages": 0}
    errors: dict[str, int] = {}
    t0 = time.monotonic()
    end = t0 + seconds

    async def one(coro: Any, record: bool) -> None:
        start = time.perf_counter()
        try:
            await coro
            counts["ok"] += 1
            if record:
                latencies.append(time.perf_counter() - start)
                sent_at.append(time.time())
        except grpc.aio.AioRpcError as e:
            counts["errors"] += 1
            errors[e.code().name] = errors.get(e.code().name, 0) + 1

    async def poller(i: int, md: dict[str, str]) -> None:
        ref = pb.ScaledObjectRef(name=f"obj-{i}", namespace="bench", scalerMetadata=md)
        next_at = t0 + period * i / len(objects)  # spread objects over the period
        while next_at < end:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            spec = stub.GetMetricSpec(ref, timeout=5)
            await one(spec, False)
            metric = (
                "inference-" + md["service"]
                if "service" in md
                else "research-" + md.get("researchClass", "")
            )
            req = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=metric)
            await one(stub.GetMetrics(req, timeout=5), True)
            await one(stub.IsActive(ref, timeout=5), False)
            await one(stub.GetMetricSpec(ref, timeout=5), False)  # HPA path
            await one(stub.GetMetrics(req, timeout=5), True)
            next_at += period
            if time.monotonic() > next_at:
                counts["late_periods"] += 1

    async def streamer(md: dict[str, str]) -> None:
        ref = pb.ScaledObjectRef(name="push", namespace="bench", scalerMetadata=md)
        call = stub.StreamIsActive(ref)
        try:
            async for _ in call:
                counts["stream_messages"] += 1
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                errors["stream-" + e.code().name] = errors.get("stream-" + e.code().name, 0) + 1

    stream_tasks = [
        asyncio.create_task(streamer(objects[i % len(objects)])) for i in range(streams)
    ]
    await asyncio.gather(*(poller(i, md) for i, md in enumerate(objects)))
    elapsed = time.monotonic() - t0
    for t in stream_tasks:
        t.cancel()
    await asyncio.gather(*stream_tasks, return_exceptions=True)
    await channel.close(None)
    return {
        "latencies": latencies,
        "sent_at": sent_at,
        "ok": counts["ok"],
        "errors": counts["errors"],
        "error_codes": errors,
        "late_periods": counts["late_periods"],
        "stream_messages": counts["stream_messages"],
        "elapsed": elapsed,
        "cpu_s": time.process_time(),
    }


async def run_probe(port: int, seconds: float, every_s: float = 0.02) -> dict[str, Any]:
    """One sequential GetMetrics every 20 ms from an otherwise idle process: what a
    client with CPU to spare (KEDA, in Go) sees, without the load generator's own
    event-loop queueing in the figure."""
    import grpc

    from scaler._proto import externalscaler_pb2 as pb
    from scaler._proto import externalscaler_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(
            name="probe", namespace="bench", scalerMetadata={"service": "svc-0"}
        )
        req = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inference-svc-0")
        await stub.GetMetrics(req, timeout=5)
        latencies: list[float] = []
        errors = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter()
            try:
                await stub.GetMetrics(req, timeout=5)
                latencies.append(time.perf_counter() - start)
            except grpc.aio.AioRpcError:
                errors += 1
            await asyncio.sleep(every_s)
    return {"latencies": latencies, "errors": errors, "cpu_s": time.process_time()}


# -- the orchestrator ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (the scaler's scrape worker is a child process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of all threads of `pid` and of its live child processes."""
    total = 0.0
    for p in proc_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def cpu_pressure_s() -> float | None:
    """Seconds during which some runnable task on the machine waited for a CPU (Linux
    PSI, /proc/pressure/cpu `some total`), or None where the kernel does not report it.
    The machine is shared: this says how much of a latency figure is the neighbours'."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def proc_rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MB, summed over `pid` and its child processes (the sum
    of the peaks: an upper bound of the peak of the sum)."""
    rss = hwm = 0
    for p in proc_tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        rss += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        hwm += int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return rss / 1024, hwm / 1024


def scaler_metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    # Generous timeout: on a shared, overloaded machine /metrics (a thread in the scaler,
    # competing for the GIL with 1,000 RPS) can be slow; a slow answer is not a failure.
    for attempt in range(3):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                text = r.read().decode()
            break
        except TimeoutError:
            if attempt == 2:
                raise
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(m: dict[Any, float], name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def metric_sum(m: dict[Any, float], name: str, **match: str) -> float:
    """Sum over every label set of `name` whose labels include `match` (or exclude !=)."""
    total = 0.0
    for (n, labels), v in m.items():
        if n != name:
            continue
        d = dict(labels)
        if all(
            d.get(k) != want[1:] if want.startswith("!") else d.get(k) == want
            for k, want in match.items()
        ):
            total += v
    return total


def failed_by(m: dict[Any, float], since: dict[Any, float] | None = None) -> dict[str, int]:
    """Failed scrapes by outcome (timeout, http_error, malformed, ...), optionally a delta."""
    out: dict[str, int] = {}
    for (n, labels), v in m.items():
        d = dict(labels)
        if n == "gpu_pool_scaler_scrape_total" and d.get("result") != "ok":
            v -= (since or {}).get((n, labels), 0.0)
            if v:
                out[d["result"]] = out.get(d["result"], 0) + int(v)
    return out


def histogram_quantile(m: dict[Any, float], name: str, q: float, **labels: str) -> float:
    buckets = []
    for (n, lab), v in m.items():
        d = dict(lab)
        if n == name + "_bucket" and all(d.get(k) == w for k, w in labels.items()):
            buckets.append((float(d["le"]), v))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return math.nan
    want = q * buckets[-1][1]
    return next(le for le, c in buckets if c >= want)


def write_config(
    path: Path, addresses: list[str], interval: float, max_concurrency: int = 64
) -> tuple[int, int]:
    import yaml

    per = 5
    services = [addresses[i : i + per] for i in range(0, len(addresses), per)]
    cfg = {
        "pool": {"name": "bench", "capacity": {"gpus": 16 * len(services) * 2}, "reserveGPUs": 8},
        "scrape": {
            "intervalSeconds": interval,
            "timeoutSeconds": min(2.0, interval),
            "staleAfterSeconds": max(30.0, 3 * interval),
            "maxConcurrency": max_concurrency,
        },
        "inference": [
            {
                "name": f"svc-{i}",
                "namespace": "bench",
                "gpusPerReplica": 1,
                "minReplicas": 1,
                "maxReplicas": 16,
                "targets": {"static": t},
                "thresholds": {"waitingPerReplica": 5, "kvCacheUsage": 0.8},
            }
            for i, t in enumerate(services)
        ],
        "research": [
            {"name": f"class-{i}", "gpusPerJob": 1, "maxJobs": 10} for i in range(len(services))
        ],
    }
    path.write_text(yaml.safe_dump(cfg))
    return len(services), len(services)


@dataclass
class Figures:
    rows: list[tuple[str, str, str, bool | None]] = field(default_factory=list)

    def add(self, what: str, value: str, target: str = "", ok: bool | None = None) -> None:
        self.rows.append((what, value, target, ok))


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
        mem = f", {kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, AttributeError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}; Linux {platform.release()}; "
        f"Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=500)
    ap.add_argument("--interval", type=float, default=5.0, help="scrape interval (s)")
    ap.add_argument("--objects", type=int, default=200, help="ScaledObjects + ScaledJobs")
    ap.add_argument("--rps", type=float, default=1000.0, help="gRPC calls per second in all")
    ap.add_argument("--streams", type=int, default=100, help="open StreamIsActive streams")
    ap.add_argument("--scrape-seconds", type=float, default=60.0, help="phase 1 length")
    ap.add_argument("--grpc-seconds", type=float, default=60.0, help="phase 2 length")
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument(
        "--max-concurrency", type=int, default=64, help="scrape.maxConcurrency (default 64)"
    )
    ap.add_argument("--out", type=Path, default=None, help="results file (Markdown)")
    ap.add_argument("--seed", type=int, default=1)
    # Internal roles (the bench starts itself as these).
    ap.add_argument("--role", choices=["main", "targets", "clients", "probe"], default="main")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--objects-json", default="")
    ap.add_argument("--result-file", default="")
    args = ap.parse_args(argv)

    if args.role == "targets":
        asyncio.run(serve_targets(args.targets, args.seed))
        return 0
    if args.role == "clients":
        objs = json.loads(args.objects_json)
        res = asyncio.run(run_clients(args.port, objs, args.rps, args.grpc_seconds, args.streams))
        # A file, not stdout: ~1 MB of latencies would fill the pipe before anyone reads it.
        Path(args.result_file).write_text(json.dumps(res))
        return 0
    if args.role == "probe":
        res = asyncio.run(run_probe(args.port, args.grpc_seconds))
        Path(args.result_file).write_text(json.dumps(res))
        return 0
    return orchestrate(args, list(sys.argv[1:] if argv is None else argv))


def orchestrate(args: argparse.Namespace, argv: list[str]) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    py = sys.executable
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    procs: list[subprocess.Popen[str]] = []
    figures = Figures()
    notes: list[str] = []
    load_before = os.getloadavg()
    started_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    progress = Progress(
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
    )
    try:
        with progress:
            setup = progress.add_task("start targets + scaler", total=3, info="")
            targets = subprocess.Popen(
                [
                    py,
                    "-m",
                    "bench.load",
                    "--role",
                    "targets",
                    "--targets",
                    str(args.targets),
                    "--seed",
                    str(args.seed),
                ],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=REPO,
            )
            procs.append(targets)
            assert targets.stdout is not None
            addresses = json.loads(targets.stdout.readline())
            progress.update(setup, advance=1, info=f"{len(addresses)} targets")

            cfg_path = tmp / "pool.yaml"
            n_services, n_classes = write_config(
                cfg_path, addresses, args.interval, args.max_concurrency
            )
            grpc_port, metrics_port = free_port(), free_port()
            log_path = tmp / "scaler.log"
            log_file = log_path.open("w")
            scaler = subprocess.Popen(
                [
                    py,
                    "-m",
                    "scaler",
                    "serve",
                    "--config",
                    str(cfg_path),
                    "--grpc-port",
                    str(grpc_port),
                    "--metrics-port",
                    str(metrics_port),
                    "--log-format",
                    "text",
                    "--log-level",
                    "INFO",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=REPO,
            )
            procs.append(scaler)
            progress.update(setup, advance=1, info=f"scaler pid {scaler.pid}")
            deadline = time.monotonic() + 120
            while True:
                try:
                    m = scaler_metrics(metrics_port)
                    if metric(m, "gpu_pool_scaler_cycles_total") >= 2:
                        break
                except OSError:
                    pass
                if scaler.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("scaler did not start:\n" + log_path.read_text()[-3000:])
                time.sleep(0.5)
            progress.update(setup, advance=1, info="2 cycles done")

            # Phase 1: scraping only.
            p1 = progress.add_task("phase 1: scrape only", total=args.scrape_seconds, info="")
            m0, cpu0, t0 = (
                scaler_metrics(metrics_port),
                proc_cpu_seconds(scaler.pid),
                time.monotonic(),
            )
            while (el := time.monotonic() - t0) < args.scrape_seconds:
                time.sleep(min(1.0, args.scrape_seconds - el))
                cpu = (proc_cpu_seconds(scaler.pid) - cpu0) / max(1e-9, time.monotonic() - t0)
                progress.update(p1, completed=time.monotonic() - t0, info=f"CPU {cpu:.0%}")
            m1, cpu1, t1 = (
                scaler_metrics(metrics_port),
                proc_cpu_seconds(scaler.pid),
                time.monotonic(),
            )
            cycles = metric(m1, "gpu_pool_scaler_cycles_total") - metric(
                m0, "gpu_pool_scaler_cycles_total"
            )
            cyc_sum = metric(m1, "gpu_pool_scaler_cycle_duration_seconds_sum") - metric(
                m0, "gpu_pool_scaler_cycle_duration_seconds_sum"
            )
            scrape_cpu = (cpu1 - cpu0) / (t1 - t0)
            scrape_errors = metric_sum(m1, "gpu_pool_scaler_scrape_total", result="!ok")
            scrapes = metric_sum(m1, "gpu_pool_scaler_scrape_total")
            fresh = metric_sum(m1, "gpu_pool_scaler_service_data_fresh")

            # Phase 2: scraping + KEDA gRPC load.
            objects: list[dict[str, str]] = []
            for i in range(args.objects):
                if i % 2 == 0:
                    objects.append({"service": f"svc-{(i // 2) % n_services}"})
                else:
                    objects.append({"researchClass": f"class-{(i // 2) % n_classes}"})
            p2 = progress.add_task("phase 2: scrape + gRPC load", total=args.grpc_seconds, info="")
            mg0, cpug0, tg0 = (
                scaler_metrics(metrics_port),
                proc_cpu_seconds(scaler.pid),
                time.monotonic(),
            )
            targets_cpu0 = proc_cpu_seconds(targets.pid)
            clients = []
            k = args.client_procs
            for c in range(k):
                mine = objects[c::k]
                clients.append(
                    subprocess.Popen(
                        [
                            py,
                            "-m",
                            "bench.load",
                            "--role",
                            "clients",
                            "--port",
                            str(grpc_port),
                            "--rps",
                            str(args.rps / k),
                            "--grpc-seconds",
                            str(args.grpc_seconds),
                            "--streams",
                            str(args.streams // k + (c < args.streams % k)),
                            "--objects-json",
                            json.dumps(mine),
                            "--result-file",
                            str(tmp / f"clients-{c}.json"),
                        ],
                        text=True,
                        env=env,
                        cwd=REPO,
                    )
                )
            procs.extend(clients)
            probe = subprocess.Popen(
                [
                    py,
                    "-m",
                    "bench.load",
                    "--role",
                    "probe",
                    "--port",
                    str(grpc_port),
                    "--grpc-seconds",
                    str(max(1.0, args.grpc_seconds - 5)),
                    "--result-file",
                    str(tmp / "probe.json"),
                ],
                text=True,
                env=env,
                cwd=REPO,
            )
            procs.append(probe)
            # CPU is measured over the steady middle of the phase (clients started, not yet
            # finishing); /metrics is read only at the window's ends and every 10 s, since
            # rendering it costs the scaler CPU too.
            open_streams_peak = 0.0
            window: dict[str, tuple[float, float, float]] = {}
            pressure: dict[str, float | None] = {}
            last_fetch = 0.0
            while any(c.poll() is None for c in clients):
                time.sleep(0.5)
                el = time.monotonic() - tg0
                edge = "a" if "a" not in window and el >= 5 else ""
                if not edge and "b" not in window and el >= args.grpc_seconds - 1:
                    edge = "b"
                if edge or el - last_fetch >= 10:
                    last_fetch = el
                    mg = scaler_metrics(metrics_port)
                    open_streams_peak = max(
                        open_streams_peak, metric(mg, "gpu_pool_scaler_open_streams")
                    )
                    if edge:
                        pressure[edge] = cpu_pressure_s()
                        window[edge] = (
                            time.monotonic(),
                            proc_cpu_seconds(scaler.pid),
                            metric_sum(mg, "gpu_pool_scaler_grpc_requests_total"),
                        )
                cpu = (proc_cpu_seconds(scaler.pid) - cpug0) / el
                progress.update(
                    p2,
                    completed=min(el, args.grpc_seconds),
                    info=f"CPU {cpu:.0%}, {open_streams_peak:.0f} streams",
                )
            for proc in [*clients, probe]:
                proc.wait()
            probe_res = json.loads((tmp / "probe.json").read_text())
            targets_cpu = proc_cpu_seconds(targets.pid) - targets_cpu0
            results = [json.loads((tmp / f"clients-{c}.json").read_text()) for c in range(k)]
            cpug1, tg1 = proc_cpu_seconds(scaler.pid), time.monotonic()
            mg1 = scaler_metrics(metrics_port)
            if "a" in window and "b" in window:
                (ta, ca, ra), (tb, cb, rb) = window["a"], window["b"]
                grpc_cpu, served_rps = (cb - ca) / (tb - ta), (rb - ra) / (tb - ta)
                pa, pb = pressure.get("a"), pressure.get("b")
                stalled = (pb - pa) / (tb - ta) if pa is not None and pb is not None else None
            else:  # a phase too short for a steady window: the whole phase
                grpc_cpu, served_rps = (cpug1 - cpug0) / (tg1 - tg0), math.nan
                stalled = None
            # Streams were dropped by the clients: the gauge must come back to 0.
            streams_after = metric(mg1, "gpu_pool_scaler_open_streams")
            for _ in range(20):
                if streams_after == 0:
                    break
                time.sleep(0.25)
                streams_after = metric(scaler_metrics(metrics_port), "gpu_pool_scaler_open_streams")
            _, rss_peak = proc_rss_mb(scaler.pid)
            rss_now, _ = proc_rss_mb(scaler.pid)
            grpc_cycles = metric(mg1, "gpu_pool_scaler_cycles_total") - metric(
                mg0, "gpu_pool_scaler_cycles_total"
            )
            grpc_cyc_sum = metric(mg1, "gpu_pool_scaler_cycle_duration_seconds_sum") - metric(
                mg0, "gpu_pool_scaler_cycle_duration_seconds_sum"
            )
            # Cycles run on a fixed cadence; the last one ended at `last_cycle`. A call is
            # "during a cycle" when it falls within the cycle time before a cycle's end.
            last_cycle = metric(mg1, "gpu_pool_scaler_last_cycle_timestamp_seconds")
            server_p99 = histogram_quantile(
                mg1, "gpu_pool_scaler_grpc_request_duration_seconds", 0.99, method="GetMetrics"
            )
            scrape_errors2 = metric_sum(mg1, "gpu_pool_scaler_scrape_total", result="!ok")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        # The scaler's log was shown if it failed to start; nothing else here is kept.
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()

    lat = sorted(x for r in results for x in r["latencies"])
    cycle_s = grpc_cyc_sum / max(1, grpc_cycles) + 0.05  # + the publish/metrics tail
    during: list[float] = []
    outside: list[float] = []
    for r in results:
        for x, at in zip(r["latencies"], r["sent_at"], strict=True):
            since_end = (at - last_cycle) % args.interval
            if cycle_s < args.interval:  # else cycles overlap: no "between"
                (during if since_end > args.interval - cycle_s else outside).append(x)
    during.sort()
    outside.sort()
    ok = sum(r["ok"] for r in results)
    errs = sum(r["errors"] for r in results)
    codes: dict[str, int] = {}
    for r in results:
        for c, n in r["error_codes"].items():
            codes[c] = codes.get(c, 0) + n
    elapsed = max(r["elapsed"] for r in results)
    late = sum(r["late_periods"] for r in results)
    stream_msgs = sum(r["stream_messages"] for r in results)
    ms = 1e3

    f = figures
    f.add("targets / services / research classes", f"{args.targets} / {n_services} / {n_classes}")
    f.add(
        "scrapes since start (phase 1 end), failed",
        f"{scrapes:.0f}, {scrape_errors:.0f} {failed_by(m1) or ''}".strip(),
        "0 failed",
        scrape_errors == 0,
    )
    f.add(
        "services fresh at phase 1 end", f"{fresh:.0f} of {n_services}", "all", fresh == n_services
    )
    f.add(
        f"phase 1: scaler CPU, scraping {args.targets} targets every {args.interval:g} s",
        f"{scrape_cpu:.1%} of one core",
        "< 50 %",
        scrape_cpu < 0.5,
    )
    f.add(
        "phase 1: control-loop cycle wall time (mean)",
        f"{cyc_sum / max(1, cycles) * ms:.0f} ms over {cycles:.0f} cycles",
    )
    f.add(
        "phase 1: scaler CPU per cycle (CPU s / cycles)",
        f"{(cpu1 - cpu0) / max(1, cycles) * ms:.0f} ms",
    )
    f.add(
        "phase 2: gRPC calls answered OK / errors",
        f"{ok} / {errs} {codes or ''}".strip(),
        "0 errors",
        errs == 0,
    )
    f.add(
        "phase 2: RPS served (client-counted)",
        f"{ok / elapsed:.0f}",
        f"{args.rps:.0f}",
        ok / elapsed >= 0.95 * args.rps,
    )
    f.add(
        "phase 2: GetMetrics latency p50 (client-observed)", f"{percentile(lat, 0.5) * ms:.2f} ms"
    )
    f.add(
        "phase 2: GetMetrics latency p99 (client-observed)",
        f"{percentile(lat, 0.99) * ms:.2f} ms",
        "< 5 ms",
        percentile(lat, 0.99) < 0.005,
    )
    plat = sorted(probe_res["latencies"])
    f.add(
        "phase 2: GetMetrics p50 / p99 / max from an idle probe client (50 RPS, sequential)",
        f"{percentile(plat, 0.5) * ms:.2f} / {percentile(plat, 0.99) * ms:.2f} / "
        f"{(plat[-1] if plat else math.nan) * ms:.1f} ms ({len(plat)} calls, "
        f"{probe_res['errors']} errors)",
        "p99 < 5 ms",
        percentile(plat, 0.99) < 0.005,
    )
    f.add(
        "phase 2: GetMetrics p99 while a scrape cycle runs / between cycles",
        f"{percentile(during, 0.99) * ms:.2f} ms ({len(during)} calls) / "
        f"{percentile(outside, 0.99) * ms:.2f} ms ({len(outside)} calls)",
    )
    f.add(
        "phase 2: GetMetrics latency max (client-observed)",
        f"{(lat[-1] if lat else math.nan) * ms:.1f} ms",
    )
    f.add("phase 2: GetMetrics handler p99 (scaler histogram bucket)", f"<= {server_p99 * ms:g} ms")
    f.add(
        "phase 2: scaler CPU (scrape + gRPC), steady window",
        f"{grpc_cpu:.1%} of one core at {served_rps:.0f} RPS (scaler-counted)",
    )
    gen_cpu = (sum(r["cpu_s"] for r in results) + probe_res["cpu_s"] + targets_cpu) / elapsed
    f.add(
        "phase 2: load generator CPU (clients + probe + targets), same cores",
        f"{gen_cpu:.0%} of one core",
    )
    if stalled is not None:
        f.add(
            "phase 2: machine CPU pressure, steady window (PSI: share of time some task "
            "waited for a CPU)",
            f"{stalled:.0%}",
        )
    f.add(
        "phase 2: control-loop cycle wall time (mean, under gRPC load)",
        f"{grpc_cyc_sum / max(1, grpc_cycles) * ms:.0f} ms over {grpc_cycles:.0f} cycles",
    )
    f.add(
        "phase 2: scrape failures during gRPC load",
        f"{scrape_errors2 - scrape_errors:.0f} {failed_by(mg1, m1) or ''}".strip(),
        "0",
        scrape_errors2 - scrape_errors == 0,
    )
    f.add(
        "phase 2: StreamIsActive open (peak) / messages received",
        f"{open_streams_peak:.0f} / {stream_msgs}",
        f"{args.streams}",
        open_streams_peak == args.streams,
    )
    f.add("open streams after clients left", f"{streams_after:.0f}", "0", streams_after == 0)
    f.add(
        "scaler RSS peak (VmHWM) / at end, incl. its child processes",
        f"{rss_peak:.0f} MB / {rss_now:.0f} MB",
        "< 200 MB",
        rss_peak < 200,
    )
    if late:
        notes.append(
            f"{late} client poll periods started late (the load generator itself fell behind)."
        )

    cmd = "python -m bench.load " + " ".join(argv)
    lines = [
        f"# Load bench: {args.targets} targets, {args.objects} objects, {args.rps:.0f} RPS",
        "",
        f"* When: {started_at}",
        f"* Command: `{cmd.strip()}` (or `make bench-load`)",
        f"* Machine: {machine()}",
        f"* Load average (1/5/15 min) before: {'/'.join(f'{x:.2f}' for x in load_before)}, "
        f"after: {'/'.join(f'{x:.2f}' for x in load_after)} (the machine is shared; targets, "
        "clients and scaler are separate processes on the same 2 cores)",
        f"* Phases: {args.scrape_seconds:g} s scrape only, then {args.grpc_seconds:g} s scrape "
        f"+ gRPC ({args.client_procs} client processes, {args.streams} StreamIsActive streams); "
        f"scrape.maxConcurrency {args.max_concurrency}",
        "",
        "| figure | value | target | |",
        "|---|---|---|---|",
    ]
    for what, value, target, passed in f.rows:
        mark = "" if passed is None else ("ok" if passed else "**MISS**")
        lines.append(f"| {what} | {value} | {target} | {mark} |")
    misses = [r for r in f.rows if r[3] is False]
    lines += [
        "",
        f"Misses: {len(misses)}" + ("" if not misses else ": " + "; ".join(r[0] for r in misses)),
    ]
    lines += [f"* {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.out or REPO / "bench" / "results" / time.strftime(
        "load-%Y%m%d-%H%M.md", time.gmtime()
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"results: {out}")
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
