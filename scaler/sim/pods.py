"""The pool's pods through their lifecycle: the one implementation the bench's engine and
the demo's cluster both drive.

* Inference (one Deployment, `scale`): a new pod is Pending until the scheduler binds it
  (possibly after preempting research pods), Loading for `cold_start_s` (model load), then
  Ready and given a replica-model row. Scale-down removes pods in ReplicaSet order
  (`scale_down_order`): a Pending or Loading pod is deleted at once; a Ready one is
  Draining until its replica process is idle, then deleted (its GPUs are free at once).
* Research (KEDA ScaledJob, `create_jobs`): a Job's pod is Pending until bound, Running
  (`research_startup_s` of start-up, then useful work) until its work is done. A pod
  evicted by priority preemption holds its GPUs for `research_hold_s` (grace period, or the
  time its SIGTERM checkpoint takes); once it is gone the Job controller re-creates it
  Pending (podFailurePolicy Ignore on DisruptionTarget: not a failure, no backoff).

The caller advances time (`step(now, idle)`) and runs the replica model; the call sites
differ only in the `Lifecycle` they pass. Deterministic: no clock, no randomness beyond
the seeded research backlog.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from scaler.sim.kube import (
    INFERENCE_PRIORITY,
    Backlog,
    Cluster,
    JobState,
    Ledger,
    Pod,
    PodPhase,
    ResearchClassSpec,
    ResearchJob,
    ScaledJobController,
    complete_job,
    preempt_job,
)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What the bench and the demo set differently: sizes and durations."""

    gpus_per_replica: int
    cold_start_s: float  # bound -> Ready (model load)
    research_startup_s: float  # bound -> useful work (image pull, start, load checkpoint)
    research_hold_s: float  # an evicted research pod holds its GPUs this long
    # True: it writes a checkpoint on SIGTERM within `research_hold_s` (loses nothing);
    # False: it loses the work since its last periodic checkpoint.
    checkpoint_on_sigterm: bool = False
    # True: research runs under the chart's queue worker, which asks the scaler for the
    # class's slots when its pod starts and takes nothing if the class's running Jobs
    # already fill them (exit 0: the Job ends, the item waits for a later Job). False: a
    # bound pod always runs (a bare jobTemplate command).
    worker_slot_check: bool = False


class RepState(Enum):
    PENDING = "pending"  # not scheduled: no free GPUs (yet)
    LOADING = "loading"  # bound, loading the model
    READY = "ready"  # serving
    DRAINING = "draining"  # removed by a scale-down, finishing its requests


@dataclass(eq=False)
class InfReplica:
    pod: Pod
    created: float
    uid: int  # per pool, in creation order (a stable name for records)
    state: RepState = RepState.PENDING
    ready_at: float = math.inf
    row: int = -1  # replica-model row while Ready or Draining


def scale_down_order(r: InfReplica) -> tuple[int, float]:
    """ReplicaSet deletion order (controller.ActivePodsWithRanks): unscheduled, then not
    Ready, then Ready; newest first within each. Not modelled: deletion cost, pods doubled
    up on a node, and that Ready pods are compared by time since Ready (log buckets)."""
    rank = {RepState.PENDING: 0, RepState.LOADING: 1, RepState.READY: 2}
    return rank[r.state], -r.created


@dataclass
class Changes:
    """What one `step` did, for the caller's replica model and records."""

    gone: list[InfReplica] = field(default_factory=list)  # drained, deleted: stop its row
    ready: list[InfReplica] = field(default_factory=list)  # Ready, row given: start serving
    preempted: list[tuple[ResearchJob, float]] = field(default_factory=list)  # GPU-s lost
    completed: list[ResearchJob] = field(default_factory=list)


class Rows:
    """Replica-model rows, lowest free first. A row is held while Ready or Draining, both
    of which hold GPUs, so `gpus // gpus_per_replica` rows always suffice."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._free = list(range(n))

    def take(self) -> int:
        if not self._free:
            raise RuntimeError(f"more than {self.n} replica rows at once")
        return self._free.pop(0)

    def give(self, row: int) -> None:
        bisect.insort(self._free, row)


class Pods:
    """The pool's cluster with one inference Deployment and research Jobs of each class."""

    def __init__(
        self,
        *,
        pool_gpus: int,
        gpus_per_node: int,
        lifecycle: Lifecycle,
        classes: Sequence[ResearchClassSpec],
        seed: int,
        ledger: Ledger,
        placement: str = "pack",
    ) -> None:
        self.cluster = Cluster(pool_gpus, gpus_per_node, placement)
        self.lc = lifecycle
        self.rows = Rows(pool_gpus // lifecycle.gpus_per_replica)
        self.ledger = ledger
        self.backlog = Backlog(list(classes), seed)
        self.scaled_jobs = {c.name: ScaledJobController(c.name, c.max_jobs) for c in classes}
        self.replicas: list[InfReplica] = []  # creation order
        self.spec_replicas = 0
        self.running: list[ResearchJob] = []  # bound, in binding order
        self._evicted: list[ResearchJob] = []  # pod terminating after preemption, in order
        self.granted: dict[str, int] = {}  # the scaler's research slots per class, now
        self._uids = 0

    @property
    def max_rows(self) -> int:
        return self.rows.n

    # ---- the Deployment --------------------------------------------------------------------
    def start_ready(self, n: int, now: float) -> list[InfReplica]:
        """Yesterday's Deployment: `n` replicas, those that fit already Ready (with rows)."""
        self.spec_replicas = n
        for _ in range(n):
            self._new_replica(now)
        loading = self._schedule(now, Changes())
        for r in loading:  # already loaded: no cold start at the start of the run
            r.state, r.ready_at, r.row = RepState.READY, now, self.rows.take()
        return loading

    def scale(self, replicas: int, now: float) -> list[InfReplica]:
        """Set `.spec.replicas` and reconcile (the Deployment controller). Returns the Ready
        replicas this scale-down set Draining (the caller stops routing to them)."""
        self.spec_replicas = replicas
        alive = [r for r in self.replicas if r.state is not RepState.DRAINING]
        for _ in range(replicas - len(alive)):
            self._new_replica(now)
        extra = len(alive) - replicas
        if extra <= 0:
            return []
        draining = []
        for r in sorted(alive, key=scale_down_order)[:extra]:
            if r.state is RepState.READY:
                r.state = RepState.DRAINING
                draining.append(r)
            else:  # Pending or Loading: nothing to finish
                self.cluster.delete(r.pod, now)
                self.replicas.remove(r)
        return draining

    def _new_replica(self, now: float) -> None:
        pod = Pod("inference", self.lc.gpus_per_replica, INFERENCE_PRIORITY, now)
        rep = InfReplica(pod, now, self._uids)
        self._uids += 1
        pod.owner = rep
        self.replicas.append(rep)
        self.cluster.submit(pod)

    # ---- research Jobs ---------------------------------------------------------------------
    def create_jobs(self, research_class: str, metric: float, now: float) -> int:
        """One ScaledJob poll: create the Jobs KEDA's default strategy asks for."""
        ctl = self.scaled_jobs[research_class]
        ctl.forget_done()
        n = ctl.to_create(metric)
        for _ in range(n):
            job = self.backlog.next_job(research_class, now)
            job.pod = Pod("research", job.cls.gpus, job.cls.pod_priority, now, job)
            ctl.jobs.append(job)
            self.cluster.submit(job.pod)
        return n

    # ---- time --------------------------------------------------------------------------------
    def step(self, now: float, idle: Callable[[int], bool]) -> Changes:
        """Kubernetes at `now`: terminated pods free their GPUs, the Job controller re-creates
        evicted pods, the scheduler binds (and preempts), idle Draining replicas are deleted,
        loaded ones become Ready, finished Jobs complete. `idle(row)`: that replica process
        has no request left."""
        ch = Changes()
        k = self.cluster
        k.release_due(now)
        # Re-created in eviction order (the order their pods were gone in).
        for job in [j for j in self._evicted if j.pod is None or j.pod.phase is PodPhase.GONE]:
            self._evicted.remove(job)
            job.state = JobState.PENDING
            job.pod = Pod("research", job.cls.gpus, job.cls.pod_priority, now, job)
            k.submit(job.pod)
        if k.pending:
            self._schedule(now, ch)
        # Deleted before the Ready ones take rows: the lowest free row goes to the new one.
        for r in [r for r in self.replicas if r.state is RepState.DRAINING and idle(r.row)]:
            k.delete(r.pod, now)
            self.rows.give(r.row)
            self.replicas.remove(r)
            ch.gone.append(r)
        for r in self.replicas:
            if r.state is RepState.LOADING and now >= r.ready_at:
                r.state, r.row = RepState.READY, self.rows.take()
                ch.ready.append(r)
        for job in [j for j in self.running if j.finish_at() <= now]:
            complete_job(job, now, self.ledger)
            self.running.remove(job)
            assert job.pod is not None
            k.delete(job.pod, now)
            ch.completed.append(job)
        return ch

    def _schedule(self, now: float, ch: Changes) -> list[InfReplica]:
        """One scheduling pass; returns the replicas bound (now Loading)."""
        bound, evicted = self.cluster.schedule(now, self.lc.research_hold_s)
        loading = []
        for pod in bound:
            if isinstance(pod.owner, InfReplica):
                rep = pod.owner
                rep.state, rep.ready_at = RepState.LOADING, now + self.lc.cold_start_s
                loading.append(rep)
            else:
                job = pod.owner
                assert isinstance(job, ResearchJob)
                if self.lc.worker_slot_check and not self._slot_free(job.cls.name):
                    self._decline(job, now)
                    continue
                job.state, job.run_from = JobState.RUNNING, now + self.lc.research_startup_s
                self.running.append(job)
        for e in evicted:
            job = e.victim.owner
            assert isinstance(job, ResearchJob)
            lost = preempt_job(
                job, now, self.ledger, checkpoint_on_sigterm=self.lc.checkpoint_on_sigterm
            )
            self.running.remove(job)
            self._evicted.append(job)
            ch.preempted.append((job, lost))
        return loading

    def _slot_free(self, research_class: str) -> bool:
        """The worker's check (`gpu-pool-worker`: live leases < the scaler's slots)."""
        return self.jobs_in(JobState.RUNNING, research_class) < self.granted.get(research_class, 0)

    def _decline(self, job: ResearchJob, now: float) -> None:
        """No slot: the worker exits 0 at once, so its Job succeeds (KEDA stops counting
        it) and the pod's GPUs are free; the item keeps its checkpoint for a later Job."""
        assert job.pod is not None
        self.cluster.delete(job.pod, now)
        self.scaled_jobs[job.cls.name].jobs.remove(job)
        self.backlog.give_back(job)
        if self.ledger.t0 <= now < self.ledger.t1:
            self.ledger.declined += 1

    # ---- counts --------------------------------------------------------------------------------
    def count(self, state: RepState) -> int:
        return sum(1 for r in self.replicas if r.state is state)

    def jobs(self, research_class: str | None = None) -> list[ResearchJob]:
        return [
            j
            for name, ctl in self.scaled_jobs.items()
            if research_class is None or name == research_class
            for j in ctl.jobs
        ]

    def jobs_in(self, state: JobState, research_class: str | None = None) -> int:
        return sum(1 for j in self.jobs(research_class) if j.state is state)

    def unfinished(self, research_class: str) -> int:
        return sum(1 for j in self.jobs(research_class) if j.state is not JobState.DONE)

    def research_gpus(self, state: JobState = JobState.RUNNING) -> int:
        """GPUs held by research pods of Jobs in `state` (EVICTED: in their grace period)."""
        held = (PodPhase.BOUND, PodPhase.TERMINATING)
        return sum(
            j.cls.gpus
            for j in self.jobs()
            if j.state is state and j.pod is not None and j.pod.phase in held
        )
