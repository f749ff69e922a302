"""One policy through one simulated pool: the time-stepped main loop.

Per step (`dt`, 1 s): route the step's arrivals; Kubernetes (release GPUs of pods whose
grace ended, schedule pending pods with preemption, replicas finishing their model load or
their drain, research Jobs completing); the policy's control cycle every scrape interval;
HPA sync every 15 s; KEDA's ScaledJob poll every 30 s; the Deployment controller; then
every replica advances by `dt`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from scaler.sim.kube import (
    INFERENCE_PRIORITY,
    RESEARCH_PRIORITY,
    Backlog,
    Cluster,
    Hpa,
    JobState,
    Ledger,
    Pod,
    ResearchClassSpec,
    ResearchJob,
    ScaledJobController,
    complete_job,
    preempt_job,
)
from scaler.sim.policies import Policy, PoolView
from scaler.sim.profile import ReplicaSpec
from scaler.sim.replica import ReplicaPool, RequestLog, Router
from scaler.sim.workload import Workload


@dataclass(frozen=True)
class PoolTiming:
    dt_s: float = 1.0
    scrape_interval_s: float = 5.0  # our control loop (scrape.intervalSeconds)
    hpa_sync_s: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    keda_polling_s: float = 30.0  # ScaledJob pollingInterval
    research_grace_s: float = 30.0  # a preempted research pod holds its GPUs this long
    # None: it does not checkpoint on SIGTERM (loses work since its last checkpoint).
    # Else: it writes a checkpoint on SIGTERM, taking this long (GPUs held until done).
    research_sigterm_checkpoint_s: float | None = None
    research_startup_s: float = 60.0  # image pull, start, load data/checkpoint: not useful
    record_every_s: float = 60.0


class RepState(Enum):
    PENDING = "pending"
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"


@dataclass(eq=False)
class InfReplica:
    pod: Pod
    created: float
    state: RepState = RepState.PENDING
    ready_at: float = math.inf
    row: int = -1


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
) -> PolicyResult:
    """Run `policy` from `t_start` (warm-up, not measured) to `t_end`; measure [0, t_end)."""
    tm = timing or PoolTiming()
    svc = policy.cfg.inference[0]
    gpr = svc.gpusPerReplica
    max_rows = pool_gpus // gpr
    log = RequestLog.of(workload.arrival, workload.prompt, workload.output)
    pool = ReplicaPool(spec, max_rows, log)
    router = Router()
    cluster = Cluster(pool_gpus, gpus_per_node)
    ledger = Ledger(0.0, t_end)
    backlog = Backlog(classes, seed)
    sj = {c.name: ScaledJobController(c.name, c.max_jobs) for c in classes}
    hpa = Hpa(svc.minReplicas, svc.maxReplicas, policy.behavior)
    replicas: list[InfReplica] = []
    free_rows = list(range(max_rows))
    series = Series()
    spec_replicas = initial_replicas
    changes = 0
    inf_gpu_s = 0.0
    res_gpu_s = 0.0
    busy_prev = np.zeros(max_rows)
    last_arrival_idx = workload.arrivals(t_start, t_start)[0]
    running_jobs: list[ResearchJob] = []

    def new_replica(now: float) -> None:
        pod = Pod("inference", gpr, INFERENCE_PRIORITY, now)
        rep = InfReplica(pod, now)
        pod.owner = rep
        replicas.append(rep)
        cluster.submit(pod)

    def reconcile(now: float) -> None:
        alive = [r for r in replicas if r.state is not RepState.DRAINING]
        for _ in range(spec_replicas - len(alive)):
            new_replica(now)
        extra = len(alive) - spec_replicas
        if extra <= 0:
            return
        rank = {RepState.PENDING: 0, RepState.LOADING: 1, RepState.READY: 2}
        # ReplicaSet deletion order: unscheduled, then not ready, then ready; newest first.
        victims = sorted(alive, key=lambda r: (rank[r.state], -r.created))[:extra]
        for r in victims:
            if r.state is RepState.PENDING or r.state is RepState.LOADING:
                cluster.delete(r.pod, now)
                replicas.remove(r)
            else:
                r.state = RepState.DRAINING
                router.route(pool, pool.drain(r.row))

    def view(now: float) -> PoolView:
        ready = [r for r in replicas if r.state is RepState.READY]
        samples = {r.row: pool.sample(r.row) for r in ready}
        busy = {}
        for r in ready:
            b = pool.busy_s[r.row]
            busy[r.row] = min(1.0, max(0.0, (b - busy_prev[r.row]) / tm.scrape_interval_s))
            busy_prev[r.row] = b
        starting = sum(1 for r in replicas if r.state in (RepState.PENDING, RepState.LOADING))
        return PoolView(now, samples, busy, starting, spec_replicas, len(ready) + starting)

    for _ in range(initial_replicas):  # warm start: replicas already serving
        new_replica(t_start)
    sigterm = tm.research_sigterm_checkpoint_s
    victim_hold_s = tm.research_grace_s if sigterm is None else sigterm
    cluster.schedule(t_start, victim_hold_s)
    for r in replicas:
        if r.pod.phase.value == "bound":
            r.state = RepState.READY
            r.row = free_rows.pop(0)
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
    v: PoolView | None = None
    for k in range(steps):
        now = t_start + k * tm.dt_s
        # Arrivals of this step go to the router (each waits for its own arrival time).
        j = workload.arrivals(now, now + tm.dt_s)[1]
        if j > last_arrival_idx or router.held:
            router.route(pool, np.arange(last_arrival_idx, j))
            rec_arrivals += j - last_arrival_idx
            last_arrival_idx = j

        # Kubernetes: GPUs of finished terminations, scheduling (with preemption).
        for pod in cluster.release_due(now):
            if pod.kind == "research":
                job = pod.owner
                assert isinstance(job, ResearchJob)
                if job.state is JobState.EVICTED:  # Job controller re-creates the pod
                    job.state = JobState.PENDING
                    job.pod = Pod("research", job.cls.gpus, RESEARCH_PRIORITY, now, job)
                    cluster.submit(job.pod)
        if cluster.pending:
            bound, evicted = cluster.schedule(now, victim_hold_s)
            for pod in bound:
                if pod.kind == "inference":
                    rep = pod.owner
                    assert isinstance(rep, InfReplica)
                    rep.state = RepState.LOADING
                    rep.ready_at = now + spec.cold_start_s
                else:
                    job = pod.owner
                    assert isinstance(job, ResearchJob)
                    job.state = JobState.RUNNING
                    job.run_from = now + tm.research_startup_s
                    running_jobs.append(job)
            for e in evicted:
                job = e.victim.owner
                assert isinstance(job, ResearchJob)
                preempt_job(job, now, ledger, checkpoint_on_sigterm=sigterm is not None)
                running_jobs.remove(job)
        for r in replicas:
            if r.state is RepState.LOADING and now >= r.ready_at:
                r.state = RepState.READY
                r.row = free_rows.pop(0)
                free_rows.sort()
                pool.start(r.row, now)
            elif r.state is RepState.DRAINING and pool.idle(r.row):
                pool.stop(r.row)
                free_rows.append(r.row)
                free_rows.sort()
                cluster.delete(r.pod, now)
                r.state = RepState.PENDING  # marker; removed below
                r.row = -2
        replicas[:] = [r for r in replicas if r.row != -2]
        if router.held and pool.serving.any():
            router.route(pool, [])
        for job in [j for j in running_jobs if j.finish_at() <= now]:
            complete_job(job, now, ledger)
            running_jobs.remove(job)
            assert job.pod is not None
            cluster.delete(job.pod, now)

        # Control plane.
        if k % every["ctl"] == 0:
            v = view(now)
            policy.control(v)
        if k % every["hpa"] == 0 and v is not None:
            want: int | None
            if policy.uses_hpa:
                raw = policy.hpa_recommendation(v, hpa)
                want = spec_replicas if raw is None else hpa.sync(now, spec_replicas, raw)
            else:
                want = policy.direct_replicas(v)
            if want is not None and want != spec_replicas:
                if now >= 0:
                    changes += abs(want - spec_replicas)
                spec_replicas = want
        if k % every["keda"] == 0:
            for name, ctl in sj.items():
                ctl.forget_done()
                for _ in range(ctl.to_create(policy.slots.get(name, 0))):
                    job = backlog.next_job(name, now)
                    job.pod = Pod("research", job.cls.gpus, RESEARCH_PRIORITY, now, job)
                    ctl.jobs.append(job)
                    cluster.submit(job.pod)
        reconcile(now)

        # Every replica serves for dt.
        pool.step(now, tm.dt_s)
        if now >= 0:
            inf_gpu_s += cluster.held["inference"] * tm.dt_s
            res_gpu_s += cluster.held["research"] * tm.dt_s
        if k % every["rec"] == 0:
            series.t.append(now)
            series.inference.append(cluster.held["inference"])
            series.research.append(cluster.held["research"])
            r_now = policy.reserve_now
            series.reserve.append(policy.cfg.pool.reserveGPUs if r_now < 0 else r_now)
            series.replicas.append(spec_replicas)
            series.ready.append(sum(1 for r in replicas if r.state is RepState.READY))
            series.arrivals_per_s.append(rec_arrivals / tm.record_every_s)
            rec_arrivals = 0
        if progress is not None and k % every["prog"] == 0:
            progress(k / steps)

    for job in running_jobs:  # still running at the end: its progress so far counts
        ledger.useful_gpu_s += job.cls.gpus * ledger.clip(job.run_from, t_end)
    m = (workload.arrival >= 0) & (workload.arrival < t_end)
    arr = workload.arrival[m]
    first = log.first_token[: log.n][m]
    ttft = np.where(np.isnan(first), t_end - arr, first - arr)
    adm = log.admitted[: log.n][m]
    queue = np.where(np.isnan(adm), t_end - arr, adm - arr)
    served = int(np.count_nonzero(~np.isnan(log.finished[: log.n][m])))
    if progress is not None:
        progress(1.0)
    return PolicyResult(
        policy.name, ttft, queue, served, inf_gpu_s, res_gpu_s, ledger, changes, series, arr
    )
