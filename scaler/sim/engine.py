"""One policy through one simulated pool: the time-stepped main loop.

Per step (`dt`, 1 s): route the step's arrivals; Kubernetes (`scaler.sim.pods`, the
lifecycle the demo runs too: release GPUs of pods whose grace ended, schedule pending pods
with preemption, replicas finishing their model load or their drain, research Jobs
completing); the policy's control cycle every scrape interval; HPA sync every 15 s; KEDA's
ScaledJob poll every 30 s; the Deployment controller; then every replica advances by `dt`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scaler.sim.kube import Hpa, Ledger, ResearchClassSpec
from scaler.sim.pods import Lifecycle, Pods, RepState
from scaler.sim.policies import LateAnswer, Policy, PoolView
from scaler.sim.profile import ReplicaSpec
from scaler.sim.replica import ReplicaPool, RequestLog, Router
from scaler.sim.workload import Workload


@dataclass(frozen=True)
class PoolTiming:
    dt_s: float = 1.0
    scrape_interval_s: float = 5.0  # our control loop (scrape.intervalSeconds)
    hpa_sync_s: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    keda_polling_s: float = 30.0  # ScaledJob pollingInterval
    # A preempted research pod holds its GPUs this long: the chart's research Job
    # terminationGracePeriodSeconds (600), all of it (the worst case for inference).
    research_grace_s: float = 600.0
    # None: it does not checkpoint on SIGTERM (loses work since its last checkpoint).
    # Else: it writes a checkpoint on SIGTERM, taking this long (GPUs held until done).
    research_sigterm_checkpoint_s: float | None = None
    # None: it holds its GPUs for the whole grace period. Else: it exits on SIGTERM after
    # this long, losing the work since its last checkpoint: a command without a SIGTERM
    # handler (the signal's default action) under the chart's worker, which forwards it.
    research_sigterm_exit_s: float | None = None
    # True: research runs under the chart's queue worker, whose pod takes nothing when it
    # starts with no free slot for its class (`Lifecycle.worker_slot_check`).
    research_worker_slot_check: bool = False
    research_startup_s: float = 60.0  # image pull, start, load data/checkpoint: not useful
    record_every_s: float = 60.0

    def __post_init__(self) -> None:
        ck, ex = self.research_sigterm_checkpoint_s, self.research_sigterm_exit_s
        if ck is not None and ex is not None:
            raise ValueError("a research pod either checkpoints on SIGTERM or exits on it")
        for hold in (ck, ex):
            if hold is not None and not 0 <= hold <= self.research_grace_s:
                raise ValueError(f"SIGTERM handling takes {hold} s, outside the grace period")

    def lifecycle(self, gpus_per_replica: int, cold_start_s: float) -> Lifecycle:
        """A pod checkpointing on SIGTERM holds its GPUs until it is written, one exiting on
        it until it is gone, else for the grace period."""
        ck, ex = self.research_sigterm_checkpoint_s, self.research_sigterm_exit_s
        hold = ck if ck is not None else ex if ex is not None else self.research_grace_s
        return Lifecycle(
            gpus_per_replica=gpus_per_replica,
            cold_start_s=cold_start_s,
            research_startup_s=self.research_startup_s,
            research_hold_s=hold,
            checkpoint_on_sigterm=ck is not None,
            worker_slot_check=self.research_worker_slot_check,
        )


@dataclass(frozen=True)
class ScrapeFaults:
    """Replicas too busy to answer /metrics in time. The real vLLM's API server, loaded
    with a 200-request queue on 2 CPU cores, answered no scrape within 3 s
    (tests/test_real_vllm.py); a GPU server's API process shares its event loop with
    tokenising and streaming too, but how late it answers under load was not measured
    here, so this is off unless a run asks for it. Each scrape, a ready replica with at
    least `waiting_at_least` requests waiting does not answer within the scrape timeout,
    with `probability`: every policy that reads /metrics (ours, and Prometheus for the
    queue baseline) misses it. It answers `answer_after_s` after the request (what it
    shows then is approximated by its state when asked), which ours reads in its next
    cycle when its `scrape.lateAnswerSeconds` keeps the request open that long; None:
    it never answers."""

    waiting_at_least: int | None = None  # None: every replica answers
    probability: float = 1.0
    answer_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.waiting_at_least is not None and self.waiting_at_least < 1:
            raise ValueError(f"unread at {self.waiting_at_least} waiting: must be at least 1")
        if not 0 < self.probability <= 1:
            raise ValueError(f"unread probability {self.probability}: must be in (0, 1]")
        if self.answer_after_s is not None and self.answer_after_s <= 0:
            raise ValueError(f"a late answer after {self.answer_after_s} s: must be > 0")


@dataclass
class Series:
    t: list[float] = field(default_factory=list)
    inference: list[int] = field(default_factory=list)
    research: list[int] = field(default_factory=list)
    reserve: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)  # spec.replicas
    ready: list[int] = field(default_factory=list)
    arrivals_per_s: list[float] = field(default_factory=list)


@dataclass
class PolicyResult:
    name: str
    # Per measured request; no first token by the end: the lower bound (end − arrival).
    ttft: npt.NDArray[np.float64]
    queue: npt.NDArray[np.float64]
    served: int
    inference_gpu_s: float
    research_alloc_gpu_s: float
    ledger: Ledger
    replica_changes: int
    series: Series
    arrival: npt.NDArray[np.float64]  # of the measured requests
    wall_s: float = 0.0
    # Measured seconds during which each signal (or "stabilization", "min", ...) set the
    # policy's target: which knob the SRE would have to turn. Empty for the baselines.
    decided_by: dict[str, float] = field(default_factory=dict)
    # The research give-back the policy planned at the end (ours: core.giveback's note).
    give_back: str = ""
    # Measured GPU-seconds no pod held, and the part of them while a created research pod
    # waited for a node with room (the free GPUs in pieces too small for it, or held for a
    # nominated inference pod).
    idle_gpu_s: float = 0.0
    idle_research_pending_gpu_s: float = 0.0
    # Per measured request, the Deployment's state when it arrived (a REPLICAS_* code):
    # which part of scaling a miss waited on. None: not recorded (a hand-built result).
    replicas_at_arrival: npt.NDArray[np.int8] | None = None
    # Measured replica scrapes of a policy that reads /metrics, and those unanswered.
    scrapes: int = 0
    unread_scrapes: int = 0


# What the asked-for replicas were doing when a request arrived, worst first: one waited for
# GPUs (Pending: research still held them, or none were free), else one was loading the
# model, else every replica asked for was serving (the policy had asked for too few).
REPLICAS_READY, REPLICAS_LOADING, REPLICAS_WAITING_FOR_GPUS = 0, 1, 2


def simulate_policy(
    policy: Policy,
    workload: Workload,
    *,
    spec: ReplicaSpec,
    pool_gpus: int,
    gpus_per_node: int,
    classes: list[ResearchClassSpec],
    t_start: float,
    t_end: float,
    initial_replicas: int,
    seed: int,
    timing: PoolTiming | None = None,
    progress: Callable[[float], None] | None = None,
    measure_from: float = 0.0,
    placement: str = "pack",
    scrape_faults: ScrapeFaults | None = None,
) -> PolicyResult:
    """Run `policy` from `t_start` (warm-up, not measured) to `t_end`; measure
    [measure_from, t_end) (multi-day runs: from the second day, once ours has history)."""
    tm = timing or PoolTiming()
    svc = policy.cfg.inference[0]
    pods = Pods(
        pool_gpus=pool_gpus,
        gpus_per_node=gpus_per_node,
        lifecycle=tm.lifecycle(svc.gpusPerReplica, spec.cold_start_s),
        classes=classes,
        seed=seed,
        ledger=Ledger(measure_from, t_end),
        placement=placement,
    )
    held = pods.cluster.held
    log = RequestLog.of(workload.arrival, workload.prompt, workload.output)
    pool = ReplicaPool(spec, pods.max_rows, log)
    router = Router()
    hpa = Hpa(svc.minReplicas, svc.maxReplicas, policy.behavior)
    series = Series()
    spec_replicas = initial_replicas
    changes = 0
    inf_gpu_s = 0.0
    res_gpu_s = 0.0
    idle_gpu_s = 0.0
    idle_pending_gpu_s = 0.0
    busy_prev = np.zeros(pods.max_rows)
    last_arrival_idx = workload.arrivals(t_start, t_start)[0]
    at_arrival = np.zeros(workload.arrival.size, dtype=np.int8)
    # Only a policy that reads /metrics meets the fault (DCGM and the oracle do not).
    faults = (scrape_faults if policy.reads_metrics else None) or ScrapeFaults()
    # Its own stream: a run without faults draws nothing, so it is the run it was before.
    fault_rng = np.random.default_rng((seed, 0x5C4A))
    scrapes = unread_scrapes = 0

    def view(now: float) -> PoolView:
        nonlocal scrapes, unread_scrapes
        ready = [r for r in pods.replicas if r.state is RepState.READY]
        samples = {r.row: pool.sample(r.row) for r in ready}
        unread: dict[int, LateAnswer] = {}
        if faults.waiting_at_least is not None:
            unread = {
                row: LateAnswer(s, faults.answer_after_s)
                for row, s in samples.items()
                if s.waiting >= faults.waiting_at_least and fault_rng.random() < faults.probability
            }
            for row in unread:
                del samples[row]
        if now >= measure_from and policy.reads_metrics:
            scrapes += len(ready)
            unread_scrapes += len(unread)
        busy = {}
        for r in ready:
            b = pool.busy_s[r.row]
            busy[r.row] = min(1.0, max(0.0, (b - busy_prev[r.row]) / tm.scrape_interval_s))
            busy_prev[r.row] = b
        starting = pods.count(RepState.PENDING) + pods.count(RepState.LOADING)
        deleting = {
            str(id(p)): p.deleted_at for p in pods.cluster.terminating if p.kind == "research"
        }
        return PoolView(
            now,
            samples,
            busy,
            starting,
            spec_replicas,
            len(ready) + starting,
            deleting,
            unread,
        )

    for r in pods.start_ready(initial_replicas, t_start):  # warm start: already serving
        pool.start(r.row, t_start)

    steps = round((t_end - t_start) / tm.dt_s)
    every = {
        "ctl": max(1, round(tm.scrape_interval_s / tm.dt_s)),
        "hpa": max(1, round(tm.hpa_sync_s / tm.dt_s)),
        "keda": max(1, round(tm.keda_polling_s / tm.dt_s)),
        "rec": max(1, round(tm.record_every_s / tm.dt_s)),
        "prog": max(1, steps // 200),
    }
    rec_arrivals = 0
    decided_by: dict[str, float] = {}
    v: PoolView | None = None
    for k in range(steps):
        now = t_start + k * tm.dt_s
        # Arrivals of this step go to the router (each waits for its own arrival time).
        j = workload.arrivals(now, now + tm.dt_s)[1]
        if j > last_arrival_idx or router.held:
            if j > last_arrival_idx:
                at_arrival[last_arrival_idx:j] = (
                    REPLICAS_WAITING_FOR_GPUS
                    if pods.count(RepState.PENDING)
                    else REPLICAS_LOADING
                    if pods.count(RepState.LOADING)
                    else REPLICAS_READY
                )
            router.route(pool, np.arange(last_arrival_idx, j))
            rec_arrivals += j - last_arrival_idx
            last_arrival_idx = j

        # Kubernetes: pods' lifecycle (scheduling with preemption, cold starts, drains, Jobs).
        ch = pods.step(now, pool.idle)
        for r in ch.gone:
            pool.stop(r.row)
        for r in ch.ready:
            pool.start(r.row, now)
        if router.held and pool.serving.any():
            router.route(pool, [])

        # Control plane.
        if k % every["ctl"] == 0:
            v = view(now)
            policy.control(v)
            pods.granted = dict(policy.slots)  # what a starting worker would be told
            if policy.decided_by and now >= measure_from:
                by = policy.decided_by
                decided_by[by] = decided_by.get(by, 0.0) + tm.scrape_interval_s
        if k % every["hpa"] == 0 and v is not None:
            want: int | None
            if policy.uses_hpa:
                raw = policy.hpa_recommendation(v, hpa)
                want = spec_replicas if raw is None else hpa.sync(now, spec_replicas, raw)
            else:
                want = policy.direct_replicas(v)
            if want is not None and want != spec_replicas:
                if now >= measure_from:
                    changes += abs(want - spec_replicas)
                spec_replicas = want
        if k % every["keda"] == 0:
            for name in pods.scaled_jobs:
                pods.create_jobs(name, policy.slots.get(name, 0), now)
        for r in pods.scale(spec_replicas, now):  # the Deployment controller
            router.route(pool, pool.drain(r.row))

        # Every replica serves for dt.
        pool.step(now, tm.dt_s)
        if now >= measure_from:
            inf_gpu_s += held["inference"] * tm.dt_s
            res_gpu_s += held["research"] * tm.dt_s
            idle = pool_gpus - held["inference"] - held["research"]
            if idle > 0:
                idle_gpu_s += idle * tm.dt_s
                if any(p.kind == "research" for p in pods.cluster.pending):
                    idle_pending_gpu_s += idle * tm.dt_s
        if k % every["rec"] == 0:
            series.t.append(now)
            series.inference.append(held["inference"])
            series.research.append(held["research"])
            r_now = policy.reserve_now
            series.reserve.append(policy.cfg.pool.reserveGPUs if r_now < 0 else r_now)
            series.replicas.append(spec_replicas)
            series.ready.append(pods.count(RepState.READY))
            series.arrivals_per_s.append(rec_arrivals / tm.record_every_s)
            rec_arrivals = 0
        if progress is not None and k % every["prog"] == 0:
            progress(k / steps)

    ledger = pods.ledger
    for job in pods.running:  # still running at the end: its progress so far counts
        ledger.useful_gpu_s += job.cls.gpus * ledger.clip(job.run_from, t_end)
    m = (workload.arrival >= measure_from) & (workload.arrival < t_end)
    arr = workload.arrival[m]
    first = log.first_token[: log.n][m]
    ttft = np.where(np.isnan(first), t_end - arr, first - arr)
    adm = log.admitted[: log.n][m]
    queue = np.where(np.isnan(adm), t_end - arr, adm - arr)
    served = int(np.count_nonzero(~np.isnan(log.finished[: log.n][m])))
    if progress is not None:
        progress(1.0)
    return PolicyResult(
        policy.name,
        ttft,
        queue,
        served,
        inf_gpu_s,
        res_gpu_s,
        ledger,
        changes,
        series,
        arr,
        decided_by=decided_by,
        give_back=policy.give_back_note(),
        idle_gpu_s=idle_gpu_s,
        idle_research_pending_gpu_s=idle_pending_gpu_s,
        replicas_at_arrival=at_arrival[m],
        scrapes=scrapes,
        unread_scrapes=unread_scrapes,
    )
