"""What the demo simulates and how the scaler is configured for it: flags, the pool,
the workload, the replica model's capacity and the compressed pool config.

Time is compressed: a day of trace time runs in `--day-seconds` real seconds, and every
interval of the generated pool config (scrape, stabilization, cold start) and of the KEDA
driver (polling) is compressed by the same factor, with a floor of `MIN_PERIOD_S` real
seconds for the periodic loops (scrape and polling) so that two CPU cores keep up. The
scaler reads counters per real second, so the token-rate threshold is scaled too.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scaler.demo.cluster import DemoCluster
from scaler.demo.queue import SEED_HOURS, seed_budget, seed_items
from scaler.demo.world import SloTracker, World
from scaler.sim.kube import ResearchClassSpec
from scaler.sim.profile import ReplicaSpec
from scaler.sim.scenario import DEFAULT_CLASSES
from scaler.sim.workload import DAY, TRACES, load_curve, make_workload

SERVICE = "chat"
NAMESPACE = "serving"
MIN_PERIOD_S = 0.4  # floor of the scrape and polling periods (real seconds)


@dataclass(frozen=True)
class ReplicaCapacity:
    per_replica_rps: float  # req/s one replica serves with 99 % of TTFTs within the SLO
    mean_tokens: float  # prompt + output tokens per request


# scaler.sim.scenario.calibrate(Scenario(), "conv"): Llama-3-70B on 4 × A100, conversation
# lengths, TTFT SLO 2 s, 14 replicas → 2.47 req/s per replica (99.0 %), 1395 tokens/request.
DEFAULT_CAPACITY = ReplicaCapacity(2.47, 1395.0)
# KEDA and chart defaults, in trace seconds (docs/keda-contract.md, "Call cadence";
# charts/gpu-pool-scaler/values.yaml).
SO_POLL_S = 15.0
SJ_POLL_S = 30.0
SCRAPE_S = 5.0
STABILIZATION_S = 300.0
STEP_S = 60.0
GRACE_S = 600.0  # research pods' terminationGracePeriodSeconds (the chart's default)
RESEARCH_STARTUP_S = 60.0  # image pull, start, load the checkpoint (bench default)
GPUS_PER_NODE = 8
# The bench's thresholds for our policy: queue and KV at the product defaults (5, 0.8:
# README.md, "Configuration reference"), plus token throughput at this share of a
# replica's calibrated capacity.
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
    # The simulated research work queue (scaler.demo.queue); False: the bench's
    # never-ending backlog, every Job has work.
    queue: bool = True
    queue_hours: float = SEED_HOURS  # seeded work: hours of each class's share of the pool

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
    p.add_argument(
        "--no-queue",
        action="store_true",
        help="no simulated work queue: every research Job has work (the bench's backlog)",
    )
    p.add_argument(
        "--queue-hours",
        type=float,
        default=SEED_HOURS,
        help="work seeded per class, in hours of its equal share of the lendable GPUs "
        f"(default {SEED_HOURS:g})",
    )
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory")
    a = p.parse_args(argv)
    if a.day_seconds <= 0 or not 0 < a.hours <= 24 * 6:
        p.error("--day-seconds must be > 0 and --hours in (0, 144]")
    if not a.queue_hours > 0:
        p.error("--queue-hours must be > 0")
    if a.pool_gpus < a.reserve_gpus + a.gpus_per_replica:
        p.error("--pool-gpus must hold the reserve and at least one replica")
    try:
        ReplicaSpec(tp=a.gpus_per_replica)
    except ValueError as e:
        p.error(f"--gpus-per-replica {a.gpus_per_replica}: {e}")
    first_s = WEEKDAY.get(a.trace, 0) * DAY + a.start_hour * 3600.0
    span_s = load_curve(a.trace).span_s
    if not 0 <= a.start_hour < 24 or first_s + max(a.hours, 24.0) * 3600.0 > span_s:
        p.error(
            f"--trace {a.trace} spans {span_s / DAY:.1f} days: --start-hour must be in "
            f"[0, 24) and --hours must fit from day {first_s / DAY:.0f} of the trace"
        )
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
        queue=not a.no_queue,
        queue_hours=a.queue_hours,
    )


def replica_capacity(
    gpus_per_replica: int, lengths: str, slo_ttft_s: float, seed: int
) -> ReplicaCapacity:
    """Requests/s a replica serves within the SLO: the bench's calibration (cached for the
    default shape; a few seconds otherwise)."""
    if (gpus_per_replica, lengths, slo_ttft_s) == (4, "conv", 2.0):
        return DEFAULT_CAPACITY
    from scaler.sim.scenario import Scenario, calibrate

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
    """The scaler's config (README.md, "Configuration reference") with every interval
    compressed."""
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
            {
                "name": c.name,
                "gpusPerJob": c.gpus,
                "weight": c.weight,
                "maxJobs": c.max_jobs,
                # The scaler counts the queue's items; the demo's reader (SimQueueReader)
                # stands in for Redis, so the URL file is never opened.
                **({"queue": {"urlFile": "(the demo's simulated queue)"}} if p.queue else {}),
            }
            for c in research_classes()
        ],
    }


def build_world(p: Params) -> World:
    spec = ReplicaSpec(tp=p.gpus_per_replica)
    curve = dataclasses.replace(load_curve(p.trace), lengths=p.lengths)
    day = WEEKDAY.get(p.trace, 0)
    # At least a whole day: the peak rate is the day's peak, however much of it runs.
    duration = max(p.hours, 24.0) * 3600.0
    workload = make_workload(
        curve,
        start_s=day * DAY + p.start_hour * 3600.0,
        duration_s=duration,
        peak_rps=p.peak_rps,
        rng=np.random.default_rng(p.seed),
        max_model_len=8192,
    )
    classes = research_classes()
    items = None
    if p.queue:
        budget = seed_budget(p.pool_gpus, p.reserve_gpus, len(classes), p.queue_hours)
        items = seed_items(classes, [budget] * len(classes), p.seed)
    cluster = DemoCluster(
        pool_gpus=p.pool_gpus,
        gpus_per_node=GPUS_PER_NODE,
        service=SERVICE,
        gpus_per_replica=p.gpus_per_replica,
        min_replicas=1,
        max_replicas=p.max_replicas,
        cold_start_s=spec.cold_start_s,
        classes=classes,
        grace_s=GRACE_S,
        startup_s=RESEARCH_STARTUP_S,
        seed=p.seed,
        items=items,
    )
    # Simulation step: 2 s at the default speed; coarser when the day is compressed more
    # (the per-step cost is mostly fixed, and a scrape then spans more trace time anyway).
    dt = float(min(5, max(1, round(p.compression / 300))))
    return World(
        dt=dt,
        spec=spec,
        workload=workload,
        cluster=cluster,
        slo=SloTracker(p.slo_ttft_s),
    )
