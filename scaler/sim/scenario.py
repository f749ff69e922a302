"""A bench scenario: pool, model, trace, research backlog; capacity calibration; the run.

Capacity at the SLO (`calibrate`): the largest steady request rate at which a pool of
`n` replicas (the count that is 90 % of the pool) serves at least `attainment` of the
requests within the TTFT SLO, under the scenario's own burst and length model. The trace
is then scaled so its peak is exactly that rate: the peak needs ~90 % of the pool's GPUs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from scaler.config import Config, parse_config
from scaler.sim.engine import PolicyResult, PoolTiming, ScrapeFaults, simulate_policy
from scaler.sim.kube import HpaBehavior, ResearchClassSpec, research_priorities
from scaler.sim.policies import (
    POLICY_NAMES,
    GpuUtilHpa,
    Oracle,
    Ours,
    Policy,
    QueueThreshold,
    StaticPeak,
    oracle_need,
)
from scaler.sim.profile import ReplicaSpec
from scaler.sim.replica import ReplicaPool, RequestLog, Router
from scaler.sim.workload import (
    DAY,
    RateCurve,
    Workload,
    load_curve,
    make_workload,
    shuffle_days,
    stationary_workload,
)


def with_chart_priorities(classes: tuple[ResearchClassSpec, ...]) -> tuple[ResearchClassSpec, ...]:
    """The classes with the PriorityClass values the chart's defaults give them."""
    values = research_priorities([(c.name, c.gpus, c.checkpoint_s, 0) for c in classes])
    return tuple(replace(c, pod_priority=values[c.name]) for c in classes)


# The chart ranks their pods' priorities by the work a preemption can lose: pretrain -100,
# finetune -110, eval -120 (the scheduler evicts evals first).
DEFAULT_CLASSES = with_chart_priorities(
    (
        ResearchClassSpec("eval", 1, median_hours=1.0, sigma=0.7, checkpoint_s=600),
        ResearchClassSpec("finetune", 4, median_hours=4.0, sigma=0.7, checkpoint_s=1200),
        ResearchClassSpec("pretrain", 8, median_hours=12.0, sigma=0.5, checkpoint_s=1800),
    )
)


@dataclass(frozen=True)
class Scenario:
    trace: str = "azure-code-week"
    days: float = 1.0
    start_day: float = 0.0  # offset into the trace
    pool_gpus: int = 64
    gpus_per_replica: int = 4
    gpus_per_node: int = 8
    # Where the scheduler binds a pod (scaler.sim.kube.PLACEMENTS): "pack" = kube-scheduler
    # with a MostAllocated profile on nvidia.com/gpu (docs/install.md), "spread" = its default.
    placement: str = "pack"
    model: str = "llama3-70b"
    seed: int = 1
    slo_ttft_s: float = 2.0
    attainment: float = 0.99  # capacity = rate where this share meets the SLO
    peak_fraction: float = 0.9  # the trace's peak needs this share of the pool
    reserve_gpus: int = 4
    cold_start_s: float = 120.0
    warmup_s: float = 1800.0
    burst: Literal["empirical", "poisson"] = "empirical"
    # Ours' thresholds (config keys). Empty: no `thresholds:` block, i.e. the product's
    # defaults (scaler.config.DEFAULT_THRESHOLDS). "auto" for tokensPerSecondPerReplica =
    # the calibrated per-replica token throughput at the SLO × throughput_target_fraction.
    ours_thresholds: tuple[tuple[str, float | str], ...] = ()
    throughput_target_fraction: float = 0.9
    ours_hpa_tolerance: float = 0.0  # behavior.*.tolerance the chart sets (k8s >= 1.33)
    # Ours' scaleDown.stabilizationSeconds; None: no `scaleDown:` key, the product's default.
    ours_scale_down_s: float | None = None
    ours_late_answer_s: float = 0.0  # ours' scrape.lateAnswerSeconds
    adaptive_reserve_max_gpus: int = 0  # pool.adaptiveReserve (0 = off, the default)
    # Ours states the objective (`slo:` = slo_ttft_s at `attainment`) and uses the forecast
    # (`pool.forecast`, research classes' checkpointIntervalSeconds); off = reactive only.
    ours_slo: bool = True
    ours_forecast: bool = True
    # Whole days of the curve in a seeded random order (a control without a daily pattern).
    shuffle_days: bool = False
    # Multi-day runs score from this day on (the forecast has a day of history); None = 1
    # for runs longer than a day, else 0.
    score_from_day: float | None = None
    # The oracle is run at each of these headrooms (replicas = demand × h / capacity): its
    # attainment/harvest frontier, read at ours' attainment ("harvest at equal attainment").
    oracle_headrooms: tuple[float, ...] = (1.0, 1.15, 1.3, 1.5)
    classes: tuple[ResearchClassSpec, ...] = DEFAULT_CLASSES
    timing: PoolTiming = field(default_factory=PoolTiming)
    scrape_faults: ScrapeFaults = field(default_factory=ScrapeFaults)

    @property
    def spec(self) -> ReplicaSpec:
        return ReplicaSpec(
            model_key=self.model, tp=self.gpus_per_replica, cold_start_s=self.cold_start_s
        )

    @property
    def score_from_s(self) -> float:
        d = self.score_from_day
        if d is None:
            d = 1.0 if self.days > 1 else 0.0
        return d * DAY

    @property
    def max_replicas(self) -> int:
        return (self.pool_gpus - self.reserve_gpus) // self.gpus_per_replica


@dataclass(frozen=True)
class Calibration:
    per_replica_rps: float
    replicas: int
    attainment: float  # measured at the chosen rate
    mean_tokens: float  # prompt + output per request
    seconds: float


def _attainment(
    spec: ReplicaSpec, kind: str, replicas: int, rps: float, slo: float, seed: int, burst: Any
) -> float:
    dur, warm = 1500.0, 300.0
    w = stationary_workload(kind, rps, dur, np.random.default_rng([seed, 99]), burst=burst)
    log = RequestLog.of(w.arrival, w.prompt, w.output)
    pool = ReplicaPool(spec, replicas, log)
    router = Router()
    for r in range(replicas):
        pool.start(r, 0.0)
    last = 0
    for s in range(int(dur)):
        j = w.arrivals(s, s + 1.0)[1]
        router.route(pool, np.arange(last, j))
        last = j
        pool.step(float(s), 1.0)
        if s > warm and sum(len(q) for q in pool.queues) > 50 * replicas:
            return 0.0  # overloaded: the queue only grows
    m = (w.arrival >= warm) & (w.arrival < dur - 30)
    ttft = log.first_token[: log.n][m] - w.arrival[m]
    return float(np.mean(np.nan_to_num(ttft, nan=np.inf) <= slo))


def calibrate(scn: Scenario, kind: str) -> Calibration:
    t0 = time.monotonic()
    spec = scn.spec
    n = max(1, round(scn.peak_fraction * scn.pool_gpus / scn.gpus_per_replica))
    lo, hi = 0.0, 4.0
    # Grow `hi` until it fails, then bisect (common random numbers: same seed each try).
    while _attainment(spec, kind, n, hi * n, scn.slo_ttft_s, scn.seed, scn.burst) >= scn.attainment:
        lo, hi = hi, hi * 2
    for _ in range(7):
        mid = (lo + hi) / 2
        ok = _attainment(spec, kind, n, mid * n, scn.slo_ttft_s, scn.seed, scn.burst)
        lo, hi = (mid, hi) if ok >= scn.attainment else (lo, mid)
    if lo <= 0:
        raise RuntimeError(f"no request rate meets the SLO on {n} replicas")
    att = _attainment(spec, kind, n, lo * n, scn.slo_ttft_s, scn.seed, scn.burst)
    w = stationary_workload(kind, 10.0, 600.0, np.random.default_rng(0), burst=scn.burst)
    mean_tokens = float(np.mean(w.prompt + w.output))
    return Calibration(lo, n, att, mean_tokens, time.monotonic() - t0)


def pool_config(scn: Scenario, cal: Calibration) -> Config:
    tps = scn.throughput_target_fraction * cal.per_replica_rps * cal.mean_tokens
    thresholds = {k: (round(tps) if v == "auto" else v) for k, v in scn.ours_thresholds}
    svc_extra: dict[str, Any] = {"thresholds": thresholds} if thresholds else {}
    sd = scn.ours_scale_down_s
    svc_scale_down = {} if sd is None else {"scaleDown": {"stabilizationSeconds": sd}}
    if scn.ours_slo:
        svc_extra["slo"] = {"ttftSeconds": scn.slo_ttft_s, "attainment": scn.attainment}
    return parse_config(
        {
            "pool": {
                "name": "sim",
                "capacity": {"gpus": scn.pool_gpus},
                "reserveGPUs": scn.reserve_gpus,
                "adaptiveReserve": {
                    "enabled": scn.adaptive_reserve_max_gpus > 0,
                    "maxGPUs": scn.adaptive_reserve_max_gpus,
                    "leadTimeSeconds": scn.cold_start_s + scn.timing.research_grace_s,
                },
                "forecast": {
                    "enabled": scn.ours_forecast,
                    "researchGraceSeconds": scn.timing.research_grace_s,
                },
            },
            "scrape": {
                "intervalSeconds": scn.timing.scrape_interval_s,
                "timeoutSeconds": 2,
                "staleAfterSeconds": 30,
                "lateAnswerSeconds": scn.ours_late_answer_s,
            },
            "inference": [
                {
                    "name": "chat",
                    "gpusPerReplica": scn.gpus_per_replica,
                    "minReplicas": 1,
                    "maxReplicas": scn.max_replicas,
                    "targets": {"static": ["127.0.0.1:8000"]},
                    **svc_extra,
                    **svc_scale_down,
                    "coldStartSeconds": scn.cold_start_s,
                }
            ],
            "research": [
                {
                    "name": c.name,
                    "gpusPerJob": c.gpus,
                    "weight": c.weight,
                    "maxJobs": c.max_jobs,
                    "checkpointIntervalSeconds": c.checkpoint_s,
                }
                for c in scn.classes
            ],
        },
        "bench scenario",
    )


@dataclass
class ScenarioRun:
    scenario: Scenario
    calibration: Calibration
    peak_rps: float
    requests: int
    results: dict[str, PolicyResult]
    static_replicas: int
    config: Config
    trace_name: str = ""  # the curve's name (with the day order when shuffled)


def make_policies(
    scn: Scenario,
    cfg: Config,
    cal: Calibration,
    w: Workload,
    t0: float,
    t1: float,
    calendar_start: float = 0.0,
) -> tuple[dict[str, Policy], int]:
    """`calendar_start`: the Unix time ours' clock reads at t = 0 (the forecast's weekdays;
    0, a Thursday, when the trace's dates are unknown)."""
    peak = float(w.rate.max())
    static_n = min(scn.max_replicas, math.ceil(peak / cal.per_replica_rps - 1e-9))
    # The oracle raises one reclaim lead ahead, and lowers only when demand stays lower for
    # the longest checkpoint interval (lending for less mostly loses the work).
    lead = max(
        scn.cold_start_s + scn.timing.research_grace_s + 60.0,
        max(c.checkpoint_s for c in scn.classes),
    )
    cap = scn.pool_gpus
    # Ours: the chart sets behavior tolerance (default 0) and no HPA scale-down window (the
    # policy stabilizes itself); baselines get Kubernetes' defaults.
    ours_hpa = HpaBehavior(tolerance=scn.ours_hpa_tolerance, scale_down_stabilization_s=0.0)
    pols: dict[str, Policy] = {
        "ours": Ours("ours", cfg, cap, behavior=ours_hpa, calendar_offset=calendar_start),
        "static-peak": StaticPeak(
            "static-peak", cfg, cap, uses_hpa=False, lends=False, replicas=static_n
        ),
        "queue-threshold": QueueThreshold("queue-threshold", cfg, cap),
        "gpu-util-hpa": GpuUtilHpa("gpu-util-hpa", cfg, cap),
    }
    # Headroom 1 always: every policy starts from its replicas (`initial_replicas`).
    for h in dict.fromkeys((1.0, *scn.oracle_headrooms)):
        need = oracle_need(
            w.rate_t, w.rate * h, t0, t1, cal.per_replica_rps, lead, 1, scn.max_replicas
        )
        pols[oracle_name(h)] = Oracle(oracle_name(h), cfg, cap, need_at=need, t0=t0)
    return pols, static_n


def initial_replicas(pols: Mapping[str, Policy], t0: float) -> int:
    """Replicas every scaling policy starts the run with: what the demand needs at `t0`
    (the oracle at headroom 1). Not the first headroom swept: ours' whole run depends on how
    it starts (coding week: 3992.4 harvested GPU-h from the oracle's 1.0, 3920.9 from 1.3)."""
    oracle = pols[oracle_name(1.0)]
    assert isinstance(oracle, Oracle)
    return oracle.target(t0)


def oracle_name(headroom: float) -> str:
    """`oracle` at headroom 1, else e.g. `oracle×1.3`."""
    return "oracle" if headroom == 1.0 else f"oracle×{headroom:g}"


def expand_policies(scn: Scenario, names: tuple[str, ...]) -> tuple[str, ...]:
    """`oracle` stands for the oracle at every headroom of the scenario."""
    out: list[str] = []
    for n in names:
        out += [oracle_name(h) for h in scn.oracle_headrooms] if n == "oracle" else [n]
    return tuple(dict.fromkeys(out))


def scenario_workload(scn: Scenario) -> tuple[RateCurve, Calibration, float, Workload]:
    """The scenario's rate curve, calibration, peak request rate and requests (the lead-in
    of `warmup_s` included): what every policy of `run_scenario` is replayed on."""
    curve = load_curve(scn.trace)
    if scn.shuffle_days:
        curve = shuffle_days(curve, np.random.default_rng([scn.seed, 5]))
    cal = calibrate(scn, curve.lengths)
    peak = cal.per_replica_rps * scn.peak_fraction * scn.pool_gpus / scn.gpus_per_replica
    w = make_workload(
        curve,
        start_s=scn.start_day * DAY,
        duration_s=scn.days * DAY,
        peak_rps=peak,
        rng=np.random.default_rng([scn.seed, 1]),
        burst=scn.burst,
        lead_in_s=scn.warmup_s,
    )
    return curve, cal, peak, w


def calendar_start(curve: RateCurve, scn: Scenario) -> float:
    """The Unix time ours' clock reads at t = 0: the first simulated day of a trace with
    dates (`--start-day` days into it), else the epoch (ServeGen: day numbers only)."""
    return 0.0 if curve.start_unix is None else curve.start_unix + scn.start_day * DAY


def run_scenario(
    scn: Scenario,
    policies: tuple[str, ...] = POLICY_NAMES,
    progress: Callable[[str, float], None] | None = None,
    jobs: int = 1,
) -> ScenarioRun:
    pool_config(scn, Calibration(1.0, 1, 1.0, 1.0, 0.0))  # bad thresholds fail before the work
    curve, cal, peak, w = scenario_workload(scn)
    t0, t1 = -scn.warmup_s, scn.days * DAY
    cfg = pool_config(scn, cal)
    pols, static_n = make_policies(scn, cfg, cal, w, t0, t1, calendar_start(curve, scn))
    policies = expand_policies(scn, policies)
    unknown = set(policies) - set(pols)
    if unknown:
        raise ValueError(f"unknown policies {sorted(unknown)}; known: {', '.join(pols)}")
    init = initial_replicas(pols, t0)

    tasks = [
        _Task(scn, n, pols[n], w, static_n if n == "static-peak" else init, t0, t1, progress)
        for n in policies
    ]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        with ProcessPoolExecutor(jobs, mp_context=get_context("fork")) as ex:
            outs = list(ex.map(_simulate_task, tasks))
    else:
        outs = [_simulate_task(t) for t in tasks]
    results = dict(zip(policies, outs, strict=True))
    return ScenarioRun(scn, cal, peak, len(w), results, static_n, cfg, curve.name)


@dataclass(frozen=True)
class _Task:
    """One policy's run; picklable, so it can go to a worker process."""

    scn: Scenario
    name: str
    policy: Policy
    workload: Workload
    initial_replicas: int
    t0: float
    t1: float
    progress: Callable[[str, float], None] | None


def _simulate_task(task: _Task) -> PolicyResult:
    scn, name, report = task.scn, task.name, task.progress
    # Simulated pods that are still starting are "not scraped" by design: the tracker's
    # per-target warning would print once per pod created over the simulated days.
    logging.getLogger("scaler.targets").setLevel(logging.ERROR)
    t = time.monotonic()
    r = simulate_policy(
        task.policy,
        task.workload,
        spec=scn.spec,
        pool_gpus=scn.pool_gpus,
        gpus_per_node=scn.gpus_per_node,
        classes=list(scn.classes),
        t_start=task.t0,
        t_end=task.t1,
        initial_replicas=task.initial_replicas,
        seed=scn.seed,
        timing=scn.timing,
        progress=(lambda f: report(name, f)) if report is not None else None,
        measure_from=scn.score_from_s,
        placement=scn.placement,
        scrape_faults=scn.scrape_faults,
    )
    r.wall_s = time.monotonic() - t
    return r


def scenario_dict(run: ScenarioRun) -> dict[str, Any]:
    s = run.scenario
    d = {k: v for k, v in asdict(s).items() if k not in ("classes", "timing")}
    d["research_classes"] = [asdict(c) for c in s.classes]
    d["timing"] = asdict(s.timing)
    d["replica"] = {
        "model": s.spec.model.name,
        "gpu": s.spec.gpu.name,
        "tp": s.spec.tp,
        "max_num_seqs": s.spec.max_num_seqs,
        "max_num_batched_tokens": s.spec.max_num_batched_tokens,
        "kv_capacity_tokens": s.spec.kv_capacity_tokens,
    }
    d["capacity_per_replica_rps"] = run.calibration.per_replica_rps
    d["calibration_attainment"] = run.calibration.attainment
    d["peak_rps"] = run.peak_rps
    d["requests"] = run.requests
    d["static_peak_replicas"] = run.static_replicas
    d["score_from_s"] = s.score_from_s
    d["oracle_headrooms"] = list(s.oracle_headrooms)
    d["trace_name"] = run.trace_name
    svc = run.config.inference[0]
    d["ours_thresholds"] = svc.thresholds.model_dump()
    d["ours_scale_down_s"] = svc.scaleDown.stabilizationSeconds  # as applied (default or flag)
    d["ours_smoothing_s"] = svc.scaleDown.smoothing_s
    return d
