"""The simulated Kubernetes side of the demo, in simulated time, built from the bench's
emulation (`scaler.sim.kube`): nodes and the scheduler with priority preemption, the HPA,
KEDA's ScaledJob controller, research Jobs that checkpoint and lose unsaved work when
preempted. This module only keeps the demo's state around them (one inference Deployment
whose Ready pods are served by replica processes, the Jobs of each class) and the events
the demo records. It does no I/O and reads no clock.

Lifecycle, as in the bench's engine:
* Deployment: a new pod is Pending until the scheduler binds it (possibly after
  preempting research pods, which keep their GPUs for the grace period), loads the model
  for `cold_start_s`, then is Ready. Scale-down removes unscheduled, then loading, then
  the newest Ready pods; a Ready pod drains and is deleted once idle (`gone`).
* Research Jobs: created by the ScaledJob controller (never deleted by it), run once
  bound (after `startup_s` of non-useful start-up), complete after their work; a preempted
  Job keeps its whole checkpoints and its pod is re-created Pending once the old pod is gone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from scaler.sim.kube import (
    INFERENCE_PRIORITY,
    RESEARCH_PRIORITY,
    Backlog,
    Cluster,
    Hpa,
    HpaBehavior,
    JobState,
    Ledger,
    Pod,
    ResearchClassSpec,
    ResearchJob,
    ScaledJobController,
    complete_job,
    preempt_job,
)


class RepState(Enum):
    PENDING = "pending"  # not scheduled: no free GPUs (yet)
    LOADING = "loading"  # bound, loading the model
    READY = "ready"  # serving
    DRAINING = "draining"  # removed by a scale-down, finishing its requests


@dataclass(eq=False)
class InfReplica:
    pod: Pod
    created: float
    state: RepState = RepState.PENDING
    ready_at: float = math.inf
    row: int = -1  # replica-model row while Ready or draining
    address: str | None = None  # host:port of its /metrics while it runs


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # simulated seconds since the start of the run
    kind: str  # scale | replica-ready | replica-gone | jobs-created | preempt | job-done
    subject: str
    detail: dict[str, float | int | str] = field(default_factory=dict)


# The chart's HPA behavior (charts/gpu-pool-scaler/values.yaml): tolerance 0, no HPA
# stabilization (the scaler stabilizes), up by max(+100 %, +4 pods) per 15 s.
CHART_HPA = HpaBehavior(
    tolerance=0.0,
    scale_up_stabilization_s=0.0,
    scale_down_stabilization_s=0.0,
    scale_up_pods=4,
    scale_up_percent=100.0,
    scale_down_percent=100.0,
    period_s=15.0,
)


class DemoCluster:
    def __init__(
        self,
        *,
        pool_gpus: int,
        gpus_per_node: int,
        service: str,
        gpus_per_replica: int,
        min_replicas: int,
        max_replicas: int,
        cold_start_s: float,
        classes: Sequence[ResearchClassSpec],
        grace_s: float,
        startup_s: float,
        seed: int,
        hpa: HpaBehavior = CHART_HPA,
    ) -> None:
        self.kube = Cluster(pool_gpus, gpus_per_node)
        self.service = service
        self.gpus_per_replica = gpus_per_replica
        self.cold_start_s = cold_start_s
        self.classes = {c.name: c for c in classes}
        self.grace_s = grace_s
        self.startup_s = startup_s
        self.hpa = Hpa(min_replicas, max_replicas, hpa)
        self.backlog = Backlog(list(classes), seed)
        self.scaled_jobs = {c.name: ScaledJobController(c.name, c.max_jobs) for c in classes}
        self.ledger = Ledger(0.0, math.inf)
        self.replicas: list[InfReplica] = []
        self.spec_replicas = 0
        self.running: list[ResearchJob] = []
        self.events: list[Event] = []
        self.research_gpu_s = 0.0  # GPU time held by running research pods (harvested)
        self.jobs_created = 0

    # ---- the Deployment and its HPA ------------------------------------------------------
    def start_with(self, n: int, now: float) -> list[InfReplica]:
        """Yesterday's Deployment: `n` replicas already Ready at the start."""
        self.spec_replicas = n
        self._reconcile(now)
        self.kube.schedule(now, self.grace_s)
        ready = []
        for r in self.replicas:
            if r.pod.phase.value != "bound":
                raise ValueError(f"{n} replicas do not fit in {self.kube.gpus} GPUs")
            r.state = RepState.READY
            r.ready_at = now
            ready.append(r)
        return ready

    def hpa_sync(self, value: float, target: float, now: float, *, why: str) -> list[InfReplica]:
        """The HPA reads the external metric (AverageValue) and sets `.spec.replicas`.

        Returns the Ready replicas a scale-down removed (the caller drains them)."""
        current = self.spec_replicas
        want = self.hpa.sync(now, current, self.hpa.recommend_average_value(value, target, current))
        if want == current:
            return []
        self.events.append(
            Event(now, "scale", self.service, {"from": current, "to": want, "why": why})
        )
        self.spec_replicas = want
        return self._reconcile(now)

    def _reconcile(self, now: float) -> list[InfReplica]:
        alive = [r for r in self.replicas if r.state is not RepState.DRAINING]
        for _ in range(self.spec_replicas - len(alive)):
            pod = Pod("inference", self.gpus_per_replica, INFERENCE_PRIORITY, now)
            rep = InfReplica(pod, now)
            pod.owner = rep
            self.replicas.append(rep)
            self.kube.submit(pod)
        extra = len(alive) - self.spec_replicas
        if extra <= 0:
            return []
        rank = {RepState.PENDING: 0, RepState.LOADING: 1, RepState.READY: 2}
        # ReplicaSet deletion order: unscheduled, then not ready, then ready; newest first.
        victims = sorted(alive, key=lambda r: (rank[r.state], -r.created))[:extra]
        draining = []
        for r in victims:
            if r.state is RepState.READY:
                r.state = RepState.DRAINING
                draining.append(r)
            else:
                self.kube.delete(r.pod, now)
                self.replicas.remove(r)
        return draining

    def gone(self, rep: InfReplica, now: float) -> None:
        """A draining replica finished its last request and exited: free its GPUs."""
        self.kube.delete(rep.pod, now)
        self.replicas.remove(rep)
        self.events.append(Event(now, "replica-gone", self.service, {"pod": id(rep.pod)}))

    def count(self, state: RepState) -> int:
        return sum(1 for r in self.replicas if r.state is state)

    # ---- research: KEDA's ScaledJob controller ------------------------------------------
    def scaled_job_poll(self, research_class: str, metric: float, now: float) -> int:
        """One ScaledJob poll with `metric` (total slots): creates maxScale − unfinished Jobs."""
        ctl = self.scaled_jobs[research_class]
        ctl.forget_done()
        n = ctl.to_create(metric)
        for _ in range(n):
            job = self.backlog.next_job(research_class, now)
            job.pod = Pod("research", job.cls.gpus, RESEARCH_PRIORITY, now, job)
            ctl.jobs.append(job)
            self.kube.submit(job.pod)
        if n:
            self.jobs_created += n
            self.events.append(Event(now, "jobs-created", research_class, {"n": n}))
        return n

    def unfinished(self, research_class: str) -> int:
        return sum(1 for j in self.scaled_jobs[research_class].jobs if j.state is not JobState.DONE)

    def jobs_in(self, state: JobState, research_class: str | None = None) -> int:
        return sum(
            1
            for name, ctl in self.scaled_jobs.items()
            if research_class is None or name == research_class
            for j in ctl.jobs
            if j.state is state
        )

    # ---- GPUs ------------------------------------------------------------------------------
    def inference_gpus(self) -> int:
        """GPUs held by inference pods (loading, ready, draining)."""
        return self.kube.held["inference"]

    def research_gpus(self, state: JobState = JobState.RUNNING) -> int:
        """GPUs held by research pods that are running (or, EVICTED: in their grace period)."""
        return sum(
            j.cls.gpus for ctl in self.scaled_jobs.values() for j in ctl.jobs if j.state is state
        )

    def useful_gpu_s(self, now: float) -> float:
        """Research work kept: checkpointed or completed, plus the progress of running Jobs."""
        running = sum(j.cls.gpus * j.progress(now) for j in self.running)
        return self.ledger.useful_gpu_s + running

    @property
    def preemptions(self) -> int:
        return self.ledger.preemptions

    @property
    def jobs_done(self) -> int:
        return self.ledger.completed

    # ---- time ------------------------------------------------------------------------------
    def step(self, now: float, dt: float) -> list[InfReplica]:
        """Advance to `now + dt`; returns the replicas that became Ready (to start serving)."""
        end = now + dt
        k = self.kube
        for pod in k.release_due(end):
            job = pod.owner
            if isinstance(job, ResearchJob) and job.state is JobState.EVICTED:
                # The Job controller re-creates the pod (podFailurePolicy ignores preemption).
                job.state = JobState.PENDING
                job.pod = Pod("research", job.cls.gpus, RESEARCH_PRIORITY, end, job)
                k.submit(job.pod)
        if k.pending:
            bound, evicted = k.schedule(end, self.grace_s)
            for pod in bound:
                if isinstance(pod.owner, InfReplica):
                    pod.owner.state = RepState.LOADING
                    pod.owner.ready_at = end + self.cold_start_s
                elif isinstance(pod.owner, ResearchJob):
                    pod.owner.state = JobState.RUNNING
                    pod.owner.run_from = end + self.startup_s
                    self.running.append(pod.owner)
            for e in evicted:
                job = e.victim.owner
                assert isinstance(job, ResearchJob)
                lost = preempt_job(job, end, self.ledger)
                self.running.remove(job)
                self.events.append(
                    Event(end, "preempt", job.cls.name, {"gpus": job.cls.gpus, "lost_gpu_s": lost})
                )
        ready = []
        for r in self.replicas:
            if r.state is RepState.LOADING and r.ready_at <= end:
                r.state = RepState.READY
                ready.append(r)
                self.events.append(Event(end, "replica-ready", self.service, {}))
        for job in [j for j in self.running if j.finish_at() <= end]:
            complete_job(job, end, self.ledger)
            self.running.remove(job)
            assert job.pod is not None
            k.delete(job.pod, end)
            self.events.append(Event(end, "job-done", job.cls.name, {"gpus": job.cls.gpus}))
        self.research_gpu_s += sum(j.cls.gpus for j in self.running) * dt
        return ready
