"""The server and the bench decide through the same function.

The same observations (per cycle: which replicas serve and what their /metrics say, which
are starting, the pool's capacity, the time) go once through the server's `ControlLoop`
(discovery + scraper fakes at its seams, injected clock) and once through the simulator's
`ours` policy; every cycle's Decision must be equal field by field. A control checks the
comparison can fail: a different threshold in the bench's config changes the decisions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from scaler.config import Config, InferenceService, parse_config
from scaler.core.accounting import Capacity
from scaler.core.decision import Decision
from scaler.core.load import Endpoint, EngineSample, ScrapeJob, ScrapeResult, TargetPhase
from scaler.loop import ControlLoop, LoopDeps
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.snapshot import Snapshots
from scaler.sim.policies import Ours, PoolView

POOL_GPUS = 64


def config(waiting: float = 5, *, slo_forecast: bool = False) -> Config:
    extra_svc: dict[str, Any] = {}
    extra_pool: dict[str, Any] = {}
    ckpt: dict[str, Any] = {}
    evals: dict[str, Any] = {"maxJobs": 16}
    if slo_forecast:
        evals = {"maxJobs": 32, "checkpointIntervalSeconds": 600}
        extra_svc = {"slo": {"ttftSeconds": 2, "attainment": 0.95, "windowSeconds": 900}}
        # minRateSwing 0: the scenario's rate is smooth, and the forecast must take part.
        fc = {"enabled": True, "minHistoryDays": 0.25, "fitHours": 1, "minRateSwing": 0}
        extra_pool = {"forecast": fc}
        # train first (priority), checkpoints hourly: the morning ramp is within its reach
        ckpt = {"checkpointIntervalSeconds": 3600, "priority": 1, "maxJobs": 32}
    return parse_config(
        {
            "pool": {
                "name": "sim",
                "capacity": {"gpus": POOL_GPUS},
                "reserveGPUs": 4,
                "adaptiveReserve": {"enabled": True, "maxGPUs": 8, "leadTimeSeconds": 60},
                **extra_pool,
            },
            "scrape": {"intervalSeconds": 5, "staleAfterSeconds": 30},
            "inference": [
                {
                    "name": "chat",
                    "gpusPerReplica": 4,
                    "minReplicas": 1,
                    "maxReplicas": 12,
                    "targets": {"static": ["127.0.0.1:1"]},  # replaced by the fake discovery
                    "thresholds": {"waitingPerReplica": waiting, "kvCacheUsage": 0.8},
                    "scaleDown": {"stabilizationSeconds": 60},
                    "coldStartSeconds": 30,
                    **extra_svc,
                }
            ],
            "research": [
                {"name": "eval", "gpusPerJob": 1, **evals},
                {"name": "train", "gpusPerJob": 8, "weight": 2, **ckpt},
            ],
        }
    )


@dataclass(frozen=True)
class Cycle:
    now: float
    samples: dict[int, EngineSample]  # ready replica row -> its /metrics
    starting: int


def sample(
    waiting: float, running: float, kv: float, tokens: float, ttft: Any = None
) -> EngineSample:
    return EngineSample(
        waiting, running, kv, kv, tokens * 0.8, tokens * 0.2, 0.0, 1.0e9, ttft_buckets=ttft
    )


def daily_scenario() -> list[Cycle]:
    """Two days every 5 min: a daily ramp, TTFT histograms that miss a 2-s objective when a
    replica serves more than 1.5 req/s, so the slo signal, the forecast (history from the
    first day) and its research limit all take part."""
    cycles = []
    counts: dict[int, list[float]] = {}
    tokens: dict[int, float] = {}
    for i in range(2 * 288):
        now = 300.0 * i
        rps = 2.0 + 8.0 * max(0.0, math.sin(2 * math.pi * (now % 86400) / 86400)) ** 2
        ready = min(12, max(1, math.ceil(rps / 1.6)))  # a little short at times
        per = rps / ready
        slow = 0.0 if per <= 1.5 else min(0.5, per / 1.5 - 1.0)
        samples = {}
        for row in range(ready):
            c = counts.setdefault(row, [0.0, 0.0])
            c[0] += per * 300 * (1 - slow)
            c[1] += per * 300
            tokens[row] = tokens.get(row, 0.0) + per * 300 * 500
            ttft = ((1.0, c[0]), (2.5, c[0]), (5.0, c[1]), (math.inf, c[1]))
            samples[row] = sample(per * 3, per * 4, 0.2, tokens[row], ttft)
        cycles.append(Cycle(now, samples, 0))
    return cycles


def scenario() -> list[Cycle]:
    """A quiet pool, a ramp (queue builds, new replicas start and join), a calm-down."""
    cycles = []
    tokens: dict[int, float] = {}
    for i in range(90):
        now = 1000.0 + 5.0 * i
        ready = 2 if i < 30 else (4 if i < 60 else 3)
        starting = 2 if 24 <= i < 30 else 0
        load = 0.3 + 2.0 * math.sin(math.pi * i / 90) ** 2  # 0.3 .. 2.3 per replica
        samples = {}
        for row in range(ready):
            tokens[row] = tokens.get(row, 0.0) + 400.0 * load * 5.0
            waiting = max(0.0, (load - 1.0) * 12.0 + row)
            samples[row] = sample(waiting, min(8.0, 4.0 * load), min(1.0, 0.35 * load), tokens[row])
        cycles.append(Cycle(now, samples, starting))
    return cycles


class Replay:
    """Discovery, scraper and clock of the server, fed from the same cycles."""

    def __init__(self, cycles: Sequence[Cycle]) -> None:
        self.cycles = cycles
        self.i = 0

    @property
    def cycle(self) -> Cycle:
        return self.cycles[self.i]

    def clock(self) -> float:
        return self.cycle.now

    def endpoints(self, svc: InferenceService) -> list[Endpoint]:
        ready = [Endpoint(f"replica-{r}", TargetPhase.SERVING) for r in self.cycle.samples]
        starting = [
            Endpoint(f"starting-{k}", TargetPhase.STARTING) for k in range(self.cycle.starting)
        ]
        return ready + starting

    async def scrape_all(self, jobs: Sequence[ScrapeJob]) -> list[ScrapeResult]:
        out = []
        for job in jobs:
            row = int(job.address.split("-")[1]) if job.address.startswith("replica-") else -1
            s = self.cycle.samples.get(row)
            err = None if s is not None else "connection refused"  # a pod still loading
            out.append(ScrapeResult(job, s, err, self.cycle.now, 0.001))
        return out


def comparable(d: Decision) -> dict[str, Any]:
    return {
        "seq": d.seq,
        "wall_time": d.wall_time,
        "services": dict(d.services),
        "research": dict(d.research),
        "pool": d.pool,
        "complete": d.complete,
    }


EPOCH = 1_715_299_200.0  # Fri 2024-05-10 00:00 UTC: the calendar of both paths


async def through_server(cfg: Config, cycles: Sequence[Cycle]) -> list[Decision]:
    replay = Replay(cycles)
    loop = ControlLoop(
        lambda: (cfg, 1),
        lambda _svc: replay,
        replay,
        Snapshots(),
        LoopDeps(capacity=lambda _c: Capacity(POOL_GPUS)),
        ScalerMetrics(CollectorRegistry()),
        clock=replay.clock,
        wall_clock=lambda: EPOCH + replay.clock(),
    )
    out = []
    for i in range(len(cycles)):
        replay.i = i
        out.append(await loop.run_once())
    return out


def through_bench(cfg: Config, cycles: Sequence[Cycle]) -> list[Decision]:
    ours = Ours("ours", cfg, POOL_GPUS, calendar_offset=EPOCH)
    out = []
    for c in cycles:
        ready = len(c.samples)
        view = PoolView(c.now, c.samples, {}, c.starting, ready + c.starting, ready + c.starting)
        ours.control(view)
        assert ours.decision is not None
        out.append(ours.decision)
    return out


async def test_server_and_bench_make_the_same_decisions() -> None:
    cycles = scenario()
    server = await through_server(config(), cycles)
    bench = through_bench(config(), cycles)
    for s, b in zip(server, bench, strict=True):
        assert comparable(s) == comparable(b), f"cycle {s.seq}"
    # The scenario exercises the path: scale-up, research lending, and the reserve moving.
    desired = [d.services["chat"].desired for d in server]
    assert min(d for d in desired if d is not None) <= 2 < max(d for d in desired if d)
    assert any(d.research["eval"].slots > 0 for d in server)
    assert len({d.pool.reserve_gpus for d in server if d.pool is not None}) > 1


@pytest.mark.parametrize("waiting", [1, 50])
async def test_control_different_config_gives_different_decisions(waiting: float) -> None:
    cycles = scenario()
    server = await through_server(config(), cycles)
    bench = through_bench(config(waiting=waiting), cycles)
    assert [comparable(d) for d in server] != [comparable(d) for d in bench]


async def test_slo_and_forecast_decide_the_same_on_both_paths() -> None:
    cycles = daily_scenario()
    cfg = config(slo_forecast=True)
    server = await through_server(cfg, cycles)
    bench = through_bench(cfg, cycles)
    for s, b in zip(server, bench, strict=True):
        assert comparable(s) == comparable(b), f"cycle {s.seq}"
    chat = [d.services["chat"] for d in server]
    # Every new part took part: the slo signal measured and learned a capacity, the
    # forecast started on the second day and asked, and it held research back.
    assert any(c.slo is not None and c.slo.capacity_rps is not None for c in chat)
    assert any(c.decided_by == "slo" for c in chat)
    assert any(c.decided_by == "forecast" for c in chat[288:])
    assert all("reactive only" in c.forecast_note for c in chat[:60])
    assert any(sum(r.withheld_slots for r in d.research.values()) > 0 for d in server)
    assert any(d.pool is not None and d.pool.forecast_withheld_gpus > 0 for d in server)
