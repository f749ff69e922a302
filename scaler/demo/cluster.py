"""A simulated Kubernetes GPU pool in simulated time: one Deployment per inference service,
research Jobs created by a ScaledJob, and the scheduler's priority preemption. No I/O.

What it models (DESIGN.md, "Giving GPUs back"):
* Deployment scale: new pods are Pending until GPUs are free, then load the model for
  `cold_start_s` (Starting) and become Ready. Scale-down removes Pending, then Starting,
  then the newest Ready pods (ReplicaSet ranking); a removed Ready pod drains (Terminating)
  and holds its GPUs until the caller says it is gone (`pod_gone`).
* Research Jobs (KEDA ScaledJob, default strategy): created by the driver, never deleted by
  it; a Job runs when its GPUs are free, finishes after its work, checkpoints every
  `checkpoint_s`.
* Priority preemption: inference pods outrank research pods. A Pending inference pod that
  does not fit evicts the newest running research pods; they keep their GPUs for the
  termination grace period, then the Job's pod is re-created Pending (podFailurePolicy
  ignores DisruptionTarget) and the work since its last checkpoint is lost. Research pods
  never preempt (`preemptionPolicy: Never`) and do not take GPUs an inference pod waits for.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum


class PodPhase(Enum):
    PENDING = "Pending"  # not scheduled: no free GPUs
    STARTING = "Starting"  # scheduled, loading the model (cold start)
    READY = "Ready"  # serving
    TERMINATING = "Terminating"  # removed by a scale-down, draining its requests


class JobPhase(Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    TERMINATING = "Terminating"  # preempted: checkpointing within the grace period


@dataclass
class Pod:
    id: int
    service: str
    gpus: int
    phase: PodPhase
    created_at: float
    ready_at: float | None = None  # when it became (or will become) Ready
    address: str | None = None  # host:port of /metrics, set by the owner when Ready


@dataclass
class Job:
    id: int
    research_class: str
    gpus: int
    work_s: float  # GPU-seconds of work per GPU (wall seconds when running)
    checkpoint_s: float
    phase: JobPhase = JobPhase.PENDING
    done_s: float = 0.0  # work done since the start, including unsaved work
    saved_s: float = 0.0  # work covered by the last checkpoint
    started_at: float | None = None  # of the current pod
    gone_at: float | None = None  # end of the grace period when Terminating
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # simulated seconds since the start of the day
    kind: str  # scale | pod-ready | pod-gone | jobs-created | job-started | preempt | job-done
    subject: str
    detail: dict[str, float | int | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    gpus_per_replica: int
    cold_start_s: float


@dataclass(frozen=True, slots=True)
class ClassSpec:
    name: str
    gpus_per_job: int
    work_s: tuple[float, float]  # uniform range of a Job's run time (s)
    checkpoint_s: float


@dataclass
class Transitions:
    """What changed in one `step`, for the owner to act on (start/stop replica processes)."""

    ready: list[Pod] = field(default_factory=list)


class Cluster:
    def __init__(
        self,
        capacity_gpus: int,
        services: list[ServiceSpec],
        classes: list[ClassSpec],
        *,
        grace_s: float,
    ) -> None:
        self.capacity = capacity_gpus
        self.services = {s.name: s for s in services}
        self.classes = {c.name: c for c in classes}
        self.grace_s = grace_s
        self.pods: dict[str, list[Pod]] = {s.name: [] for s in services}
        self.draining: list[Pod] = []
        self.jobs: list[Job] = []
        self.events: list[Event] = []
        self._ids = itertools.count(1)
        # Deterministic spread of Job lengths over each class's range.
        self._work_cycle = itertools.cycle((0.1, 0.9, 0.5, 0.3, 0.7, 0.0, 1.0, 0.2, 0.8, 0.6))
        # Accounting (simulated seconds x GPUs).
        self.research_gpu_s = 0.0  # GPU time research pods held while running
        self.lost_gpu_s = 0.0  # GPU time of work lost to preemption (since last checkpoint)
        self.preemptions = 0
        self.jobs_done = 0
        self.jobs_created = 0

    # ---- the Deployment ----------------------------------------------------------------
    def replicas(self, service: str) -> int:
        """`.spec.replicas`: pods that are not terminating."""
        return len(self.pods[service])

    def count(self, service: str, phase: PodPhase) -> int:
        if phase is PodPhase.TERMINATING:
            return sum(1 for p in self.draining if p.service == service)
        return sum(1 for p in self.pods[service] if p.phase is phase)

    def add_ready(self, service: str, n: int, now: float) -> list[Pod]:
        """Pods that exist already at the start (yesterday's Deployment)."""
        spec = self.services[service]
        pods = [
            Pod(next(self._ids), service, spec.gpus_per_replica, PodPhase.READY, now, now)
            for _ in range(n)
        ]
        if self.free_gpus() < n * spec.gpus_per_replica:
            raise ValueError(f"{n} replicas of {service} do not fit in {self.capacity} GPUs")
        self.pods[service].extend(pods)
        return pods

    def scale(self, service: str, replicas: int, now: float, *, why: str = "") -> list[Pod]:
        """Set `.spec.replicas`. Returns the Ready pods removed (the owner drains them)."""
        pods = self.pods[service]
        before = len(pods)
        if replicas == before:
            return []
        self.events.append(
            Event(now, "scale", service, {"from": before, "to": replicas, "why": why})
        )
        spec = self.services[service]
        for _ in range(replicas - before):
            pods.append(Pod(next(self._ids), service, spec.gpus_per_replica, PodPhase.PENDING, now))
        removed: list[Pod] = []
        rank = {PodPhase.PENDING: 0, PodPhase.STARTING: 1, PodPhase.READY: 2}
        while len(pods) > replicas:
            victim = min(pods, key=lambda p: (rank[p.phase], -p.created_at, -p.id))
            pods.remove(victim)
            if victim.phase is PodPhase.READY:
                victim.phase = PodPhase.TERMINATING
                self.draining.append(victim)
                removed.append(victim)
        self.schedule(now)
        return removed

    def pod_gone(self, pod: Pod, now: float) -> None:
        """A draining pod finished its last request and exited: its GPUs are free."""
        self.draining.remove(pod)
        self.events.append(Event(now, "pod-gone", pod.service, {"pod": pod.id}))
        self.schedule(now)

    # ---- the ScaledJob -------------------------------------------------------------------
    def unfinished(self, research_class: str) -> int:
        """Jobs KEDA counts as running: every unfinished Job, pending ones included."""
        return sum(1 for j in self.jobs if j.research_class == research_class)

    def create_jobs(self, research_class: str, n: int, now: float) -> None:
        spec = self.classes[research_class]
        lo, hi = spec.work_s
        for _ in range(n):
            work = lo + (hi - lo) * next(self._work_cycle)
            self.jobs.append(
                Job(next(self._ids), research_class, spec.gpus_per_job, work, spec.checkpoint_s)
            )
        self.jobs_created += n
        self.events.append(Event(now, "jobs-created", research_class, {"n": n}))
        self.schedule(now)

    def jobs_in(self, phase: JobPhase, research_class: str | None = None) -> int:
        return sum(
            1
            for j in self.jobs
            if j.phase is phase and (research_class is None or j.research_class == research_class)
        )

    # ---- GPUs ----------------------------------------------------------------------------
    def inference_gpus(self) -> int:
        """GPUs held by inference pods (Starting, Ready, Terminating)."""
        held = sum(
            p.gpus for pods in self.pods.values() for p in pods if p.phase is not PodPhase.PENDING
        )
        return held + sum(p.gpus for p in self.draining)

    def research_gpus(self, phase: JobPhase | None = None) -> int:
        if phase is None:
            return sum(j.gpus for j in self.jobs if j.phase is not JobPhase.PENDING)
        return sum(j.gpus for j in self.jobs if j.phase is phase)

    def free_gpus(self) -> int:
        return self.capacity - self.inference_gpus() - self.research_gpus()

    # ---- time ----------------------------------------------------------------------------
    def step(self, now: float, dt: float) -> Transitions:
        """Advance from `now` to `now + dt`."""
        end = now + dt
        out = Transitions()
        for pods in self.pods.values():
            for p in pods:
                if p.phase is PodPhase.STARTING and p.ready_at is not None and p.ready_at <= end:
                    p.phase = PodPhase.READY
                    out.ready.append(p)
                    self.events.append(Event(p.ready_at, "pod-ready", p.service, {"pod": p.id}))
        finished: list[Job] = []
        for j in self.jobs:
            if j.phase is JobPhase.RUNNING:
                j.done_s += dt
                self.research_gpu_s += j.gpus * dt
                # Periodic checkpoints since the pod started.
                assert j.started_at is not None
                j.saved_s = max(j.saved_s, j.done_s - (end - j.started_at) % j.checkpoint_s)
                if j.done_s >= j.work_s:
                    finished.append(j)
            elif j.phase is JobPhase.TERMINATING and j.gone_at is not None and j.gone_at <= end:
                # The pod is gone; the Job re-creates it, resuming from its checkpoint.
                j.phase = JobPhase.PENDING
                j.gone_at = None
        for j in finished:
            self.jobs.remove(j)
            self.jobs_done += 1
            self.events.append(Event(end, "job-done", j.research_class, {"job": j.id}))
        self.schedule(end)
        return out

    def schedule(self, now: float) -> None:
        """One scheduler pass: inference first (higher priority), then research FIFO."""
        free = self.free_gpus()
        coming = self.research_gpus(JobPhase.TERMINATING)  # freed when their grace ends
        for pods in self.pods.values():
            for p in pods:
                if p.phase is not PodPhase.PENDING:
                    continue
                if free >= p.gpus:
                    free -= p.gpus
                    p.phase = PodPhase.STARTING
                    p.ready_at = now + self.services[p.service].cold_start_s
                    continue
                short = p.gpus - free - coming
                if short > 0:
                    coming += self._preempt(short, now)
                # Nominated: this pod waits for the GPUs that are free or being freed.
                take = min(free, p.gpus)
                free -= take
                coming -= p.gpus - take
        if free <= 0:
            return
        for j in self.jobs:
            if j.phase is JobPhase.PENDING and j.gpus <= free:
                free -= j.gpus
                j.phase = JobPhase.RUNNING
                j.started_at = now
                self.events.append(Event(now, "job-started", j.research_class, {"job": j.id}))

    def _preempt(self, gpus: int, now: float) -> int:
        """Evict the newest running research pods until `gpus` are on their way back."""
        running = sorted(
            (j for j in self.jobs if j.phase is JobPhase.RUNNING),
            key=lambda j: (j.started_at or 0.0, j.id),
            reverse=True,
        )
        freed = 0
        for j in running:
            if freed >= gpus:
                break
            lost = j.done_s - j.saved_s
            self.lost_gpu_s += lost * j.gpus
            j.done_s = j.saved_s
            j.phase = JobPhase.TERMINATING
            j.gone_at = now + self.grace_s
            j.preemptions += 1
            self.preemptions += 1
            freed += j.gpus
            self.events.append(
                Event(now, "preempt", j.research_class, {"job": j.id, "lost_s": lost})
            )
        return freed
