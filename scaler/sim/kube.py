"""Kubernetes and KEDA, as far as the pool's behaviour depends on them.

* `Cluster`: nodes with GPUs, pods bound in priority order to a node chosen by
  `placement` ("pack": the fewest GPUs left over, kube-scheduler with a MostAllocated
  profile on nvidia.com/gpu; "spread": the most GPUs free, its default LeastAllocated
  profile; docs/install.md "Pack GPUs"; e2e scenario 11 checks both), and
  kube-scheduler priority preemption: a pending inference pod that fits nowhere evicts
  lower-priority pods on one node, chosen as kube-scheduler's default preemption does (on
  each node all lower pods out, then the most important reprieved first: higher priority,
  then earlier start; the node whose highest victim priority is lowest, then the smallest
  sum of priorities, the fewest victims, the latest start), is nominated to that node, and
  binds when the victims' grace period ends, or on any node where room appears first
  (KEP-1923, e2e scenario 13). Research pods have the PriorityClass value
  the chart gives their class (`research_priorities`).
* `Hpa`: the HorizontalPodAutoscaler algorithm for one target (sync every 15 s):
  tolerance, AverageValue / per-pod formulas, stabilization windows and rate policies.
* `ScaledJobController`: KEDA's ScaledJob default strategy (never deletes Jobs).
* `ResearchJob`: a Job from a never-ending backlog; work since its last checkpoint is lost
  when its pod is preempted, then the Job controller re-creates the pod (pending).

Time is injected (`now` arguments); nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

INFERENCE_PRIORITY = 1000
RESEARCH_PRIORITY = 0  # research pods of a ResearchClassSpec without its own value
_PRIORITY_SHIFT = 2**31  # kube-scheduler adds MaxInt32 + 1 before summing victim priorities


class PodPhase(Enum):
    PENDING = "pending"  # not bound to a node
    BOUND = "bound"  # holds its GPUs
    TERMINATING = "terminating"  # evicted or deleted, still holds its GPUs until `free_at`
    GONE = "gone"


@dataclass(eq=False)
class Pod:
    kind: str  # "inference" | "research"
    gpus: int
    priority: int
    created: float
    owner: object = None
    phase: PodPhase = PodPhase.PENDING
    node: int = -1
    nominated: int = -1  # node chosen by preemption, waiting for victims to go
    bound_at: float = math.nan
    free_at: float = math.inf  # TERMINATING: when the GPUs are released
    deleted_at: float = math.nan  # TERMINATING: when the deletion (or preemption) was asked


@dataclass(frozen=True, slots=True)
class Preemption:
    victim: Pod
    at: float
    for_pod: Pod


PLACEMENTS = ("pack", "spread")


class Cluster:
    """Nodes, pods and the scheduler. `gpus` split into nodes of `gpus_per_node`."""

    def __init__(self, gpus: int, gpus_per_node: int = 8, placement: str = "pack") -> None:
        if gpus <= 0 or gpus_per_node <= 0:
            raise ValueError("gpus and gpus_per_node must be > 0")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, not {placement!r}")
        self.placement = placement
        sizes = [gpus_per_node] * (gpus // gpus_per_node)
        if gpus % gpus_per_node:
            sizes.append(gpus % gpus_per_node)
        self.capacity = np.asarray(sizes, dtype=np.int64)
        self.free = self.capacity.copy()
        self.reserved = np.zeros_like(self.free)  # held for nominated pods
        self.pods_on: list[list[Pod]] = [[] for _ in sizes]
        self.pending: list[Pod] = []
        self.terminating: list[Pod] = []
        self.held = {"inference": 0, "research": 0}  # GPUs held (bound or terminating)
        self._dirty = False  # something changed since the last scheduling pass

    @property
    def gpus(self) -> int:
        return int(self.capacity.sum())

    def used_by(self, kind: str) -> int:
        return sum(p.gpus for pods in self.pods_on for p in pods if p.kind == kind)

    def submit(self, pod: Pod) -> None:
        pod.phase = PodPhase.PENDING
        self.pending.append(pod)
        self._dirty = True

    def delete(self, pod: Pod, now: float, grace_s: float = 0.0) -> None:
        """Delete a pod: a pending one vanishes; a bound one frees its GPUs after grace."""
        self._dirty = True
        if pod.phase is PodPhase.PENDING:
            self.pending.remove(pod)
            if pod.nominated >= 0:
                self.reserved[pod.nominated] -= pod.gpus
                pod.nominated = -1
            pod.phase = PodPhase.GONE
        elif pod.phase is PodPhase.BOUND:
            pod.phase = PodPhase.TERMINATING
            pod.free_at = now + grace_s
            pod.deleted_at = now
            self.terminating.append(pod)
            if grace_s <= 0:
                self.release_due(now)

    def release_due(self, now: float) -> list[Pod]:
        """Release the GPUs of terminating pods whose grace period is over."""
        done = [p for p in self.terminating if p.free_at <= now]
        self._dirty |= bool(done)
        for p in done:
            self.terminating.remove(p)
            self.pods_on[p.node].remove(p)
            self.free[p.node] += p.gpus
            self.held[p.kind] -= p.gpus
            p.phase = PodPhase.GONE
        return done

    def _bind(self, pod: Pod, node: int, now: float) -> None:
        self.pending.remove(pod)
        if pod.nominated >= 0:
            self.reserved[pod.nominated] -= pod.gpus
            pod.nominated = -1
        pod.phase = PodPhase.BOUND
        pod.node = node
        pod.bound_at = now
        self.free[node] -= pod.gpus
        self.held[pod.kind] += pod.gpus
        self.pods_on[node].append(pod)

    def _fit(self, pod: Pod) -> int:
        """The node a pending pod binds to, -1 if it fits nowhere. "pack": the fewest GPUs
        left over, so whole nodes stay free for the next 4- or 8-GPU pod; "spread": the
        most GPUs free (ties: the first node, in both). Measured on the coding week
        (docs/bench.md "Placement"), spreading costs research work (on `--seed 2` inference
        GPUs too): a new replica more often finds no node with room and preempts."""
        room = self.free - self.reserved
        ok = np.flatnonzero(room >= pod.gpus)
        if ok.size == 0:
            return -1
        pick = np.argmin if self.placement == "pack" else np.argmax
        return int(ok[pick(room[ok])])

    def schedule(self, now: float, grace_s: float) -> tuple[list[Pod], list[Preemption]]:
        """One scheduling pass over pending pods, highest priority first, oldest first."""
        bound: list[Pod] = []
        evicted: list[Preemption] = []
        if not self.pending or not self._dirty:
            return bound, evicted  # nothing changed: the same pods still do not fit
        self._dirty = False
        for pod in sorted(self.pending, key=lambda p: (-p.priority, p.created)):
            if pod.nominated >= 0:
                n = pod.nominated
                # Its own reservation counts for it.
                if self.free[n] - (self.reserved[n] - pod.gpus) >= pod.gpus:
                    self._bind(pod, n, now)
                    bound.append(pod)
                    continue
                # KEP-1923: the nominated node first, then every node. A replica whose
                # victims are still terminating binds wherever room appears meanwhile (e2e
                # scenario 13); it does not preempt again while they terminate.
                node = self._fit(pod)
                if node >= 0:
                    self._bind(pod, node, now)
                    bound.append(pod)
                continue
            node = self._fit(pod)
            if node >= 0:
                self._bind(pod, node, now)
                bound.append(pod)
            elif pod.kind == "inference":  # research: preemptionPolicy Never
                victims = self._preempt(pod, now, grace_s)
                evicted.extend(Preemption(v, now, pod) for v in victims)
        return bound, evicted

    def _preempt(self, pod: Pod, now: float, grace_s: float) -> list[Pod]:
        """Pick a node and the lower-priority victims on it as kube-scheduler's default
        preemption does (see the module docstring); nominate the pod there."""
        best: tuple[tuple[int, int, int, float], int, list[Pod]] | None = None
        for n in range(self.capacity.size):
            room = int(self.free[n] - self.reserved[n])
            # GPUs already on their way out (terminating) count: no new victims needed for them.
            leaving = sum(p.gpus for p in self.pods_on[n] if p.phase is PodPhase.TERMINATING)
            if room + leaving >= pod.gpus:
                key = (-_PRIORITY_SHIFT, 0, 0, 0.0)  # no victim needed: before any other
                if best is None or key < best[0]:
                    best = (key, n, [])
                continue
            cands = [
                p
                for p in self.pods_on[n]
                if p.phase is PodPhase.BOUND and p.priority < pod.priority
            ]
            got = room + leaving + sum(p.gpus for p in cands)
            if got < pod.gpus:
                continue
            # kube-scheduler's SelectVictimsOnNode: every lower pod out, then the most
            # important reprieved first (higher priority, then earlier start) while it fits.
            chosen = list(cands)
            for p in sorted(cands, key=lambda p: (-p.priority, p.bound_at)):
                if got - p.gpus >= pod.gpus:
                    chosen.remove(p)
                    got -= p.gpus
            # pickOneNodeForPreemption: lowest highest-victim priority, smallest sum of
            # priorities (shifted positive, so fewer victims count less), fewest victims,
            # latest start among the highest-priority victims.
            top = max(p.priority for p in chosen)
            key = (
                top,
                sum(p.priority + _PRIORITY_SHIFT for p in chosen),
                len(chosen),
                -min(p.bound_at for p in chosen if p.priority == top),
            )
            if best is None or key < best[0]:
                best = (key, n, chosen)
        if best is None:
            return []
        _, node, victims = best
        for v in victims:
            self.delete(v, now, grace_s)
        pod.nominated = node
        self.reserved[node] += pod.gpus
        return victims


# ---- HPA ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HpaBehavior:
    """autoscaling/v2 behavior (defaults = Kubernetes defaults) plus the tolerance."""

    tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance / behavior.*.tolerance
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    scale_up_pods: int = 4  # policy Pods: 4 per period
    scale_up_percent: float = 100.0  # policy Percent: 100 % per period (selectPolicy Max)
    scale_down_percent: float = 100.0
    period_s: float = 15.0


class Hpa:
    """One HPA. `sync` is called every sync period (15 s) with the metric as read then."""

    def __init__(self, min_replicas: int, max_replicas: int, behavior: HpaBehavior) -> None:
        self.min = max(1, min_replicas)
        self.max = max_replicas
        self.behavior = behavior
        self._recs: deque[tuple[float, int]] = deque()
        self._events: deque[tuple[float, int]] = deque()  # (time, replica change)

    def recommend_average_value(self, value: float, target: float, current: int) -> int:
        """External metric, AverageValue: keep `current` inside the tolerance, else
        ceil(value / target) (replica_calculator.go GetExternalMetricReplicas)."""
        if current > 0:
            ratio = value / (target * current)
            if abs(1.0 - ratio) <= self.behavior.tolerance:
                return current
        return math.ceil(value / target - 1e-9)

    def recommend_per_pod(self, average: float, target: float, ready: int, current: int) -> int:
        """Pods metric: ratio = average / target; outside tolerance, ceil(ratio × ready)."""
        ratio = average / target
        if abs(1.0 - ratio) <= self.behavior.tolerance:
            return current
        return math.ceil(ratio * ready - 1e-9)

    def sync(self, now: float, current: int, recommendation: int) -> int:
        """Stabilize and rate-limit a raw recommendation; returns the new spec.replicas."""
        b = self.behavior
        rec = max(self.min, min(self.max, recommendation))
        self._recs.append((now, rec))
        horizon = now - max(b.scale_up_stabilization_s, b.scale_down_stabilization_s)
        while self._recs and self._recs[0][0] < horizon:
            self._recs.popleft()
        up_cut = now - b.scale_up_stabilization_s
        down_cut = now - b.scale_down_stabilization_s
        up_rec = min((r for t, r in self._recs if t >= up_cut), default=rec)
        down_rec = max((r for t, r in self._recs if t >= down_cut), default=rec)
        desired = current
        if desired < up_rec:
            desired = up_rec
        if desired > down_rec:
            desired = down_rec
        # Rate policies over the last period: replicas at the period start = current − changes.
        while self._events and self._events[0][0] <= now - b.period_s:
            self._events.popleft()
        start = current - sum(d for _, d in self._events)
        if desired > current:
            limit = max(start + b.scale_up_pods, math.ceil(start * (1 + b.scale_up_percent / 100)))
            desired = min(desired, limit)
        elif desired < current:
            limit = math.floor(start * (1 - b.scale_down_percent / 100))
            desired = max(desired, limit)
        desired = max(self.min, min(self.max, desired))
        if desired != current:
            self._events.append((now, desired - current))
        return desired


# ---- research Jobs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResearchClassSpec:
    name: str
    gpus: int
    median_hours: float  # lognormal duration of useful work
    sigma: float
    checkpoint_s: float
    max_jobs: int = 64
    weight: float = 1.0
    # The PriorityClass value of the class's pods (below inference's): see research_priorities.
    pod_priority: int = RESEARCH_PRIORITY


def research_priorities(
    classes: Sequence[tuple[str, int, float, int]], base: int = -100, spread: int = 10
) -> dict[str, int]:
    """PriorityClass value per research class, as the chart deploys them
    (`priorityClasses.research.{value,spread}`, template `gps.researchRanks`; test_chart
    checks the two agree). Classes of (name, gpusPerJob, checkpointIntervalSeconds,
    priority) ranked by config priority, then by the work a preemption can lose
    (gpusPerJob x checkpointIntervalSeconds, whole seconds), then gpusPerJob, then name;
    the first gets `base`, each next one `spread` lower: the scheduler evicts the cheapest
    to lose first."""
    order = sorted(classes, key=lambda c: (-c[3], -(c[1] * int(c[2])), -c[1], c[0]))
    return {c[0]: base - spread * i for i, c in enumerate(order)}


class JobState(Enum):
    PENDING = "pending"
    RUNNING = "running"  # pod bound (starting up, then doing useful work)
    EVICTED = "evicted"  # pod terminating after preemption
    DONE = "done"


@dataclass(eq=False)
class ResearchJob:
    cls: ResearchClassSpec
    work_s: float  # useful seconds needed
    created: float
    saved_s: float = 0.0  # checkpointed useful work
    state: JobState = JobState.PENDING
    pod: Pod | None = None
    run_from: float = math.inf  # useful work of the current pod starts (bound + startup)
    preemptions: int = 0

    def progress(self, now: float) -> float:
        """Useful seconds of the current pod run (not yet checkpointed)."""
        return max(0.0, now - self.run_from) if self.state is JobState.RUNNING else 0.0

    def finish_at(self) -> float:
        return self.run_from + (self.work_s - self.saved_s)


@dataclass
class Ledger:
    """Research accounting inside the measured window [t0, t1)."""

    t0: float
    t1: float
    useful_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    preemptions: int = 0
    completed: int = 0
    declined: int = 0  # pods whose worker found no slot and took nothing

    def clip(self, a: float, b: float) -> float:
        return max(0.0, min(b, self.t1) - max(a, self.t0))


class Backlog:
    """Never runs dry: each class draws durations from its own seeded stream, so the i-th
    Job of a class is the same Job under every policy."""

    def __init__(self, classes: list[ResearchClassSpec], seed: int) -> None:
        self.classes = {c.name: c for c in classes}
        self._rng = {c.name: np.random.default_rng([seed, i, 7]) for i, c in enumerate(classes)}
        # Items a worker put back untaken (no slot): the class's next Jobs take them first.
        self._returned: dict[str, deque[ResearchJob]] = {c.name: deque() for c in classes}

    def give_back(self, job: ResearchJob) -> None:
        job.state, job.pod, job.run_from = JobState.PENDING, None, math.inf
        self._returned[job.cls.name].append(job)

    def next_job(self, cls: str, now: float) -> ResearchJob:
        if self._returned[cls]:
            return self._returned[cls].popleft()
        c = self.classes[cls]
        hours = c.median_hours * float(np.exp(self._rng[cls].normal(0.0, c.sigma)))
        return ResearchJob(c, max(60.0, hours * 3600.0), now)


def preempt_job(
    job: ResearchJob, now: float, ledger: Ledger, *, checkpoint_on_sigterm: bool = False
) -> float:
    """The job's pod was evicted at `now`: keep whole checkpoints, lose the rest.

    Returns the GPU-seconds lost. By default the pod does not use its grace period to
    checkpoint (the conservative case); with `checkpoint_on_sigterm` it saves everything
    (the chart's contract: the grace period is for checkpointing). The Job is re-created
    pending once the pod is gone.
    """
    x = job.progress(now)
    if checkpoint_on_sigterm:
        kept = x
    else:
        kept = math.floor(x / job.cls.checkpoint_s) * job.cls.checkpoint_s if x > 0 else 0.0
    lost = x - kept
    g = job.cls.gpus
    ledger.useful_gpu_s += g * ledger.clip(job.run_from, job.run_from + kept)
    ledger.lost_gpu_s += g * ledger.clip(now - lost, now)
    if ledger.t0 <= now < ledger.t1:
        ledger.preemptions += 1
    job.saved_s += kept
    job.preemptions += 1
    job.state = JobState.EVICTED
    job.run_from = math.inf
    return g * lost


def complete_job(job: ResearchJob, now: float, ledger: Ledger) -> None:
    ledger.useful_gpu_s += job.cls.gpus * ledger.clip(job.run_from, now)
    if ledger.t0 <= now < ledger.t1:
        ledger.completed += 1
    job.saved_s = job.work_s
    job.state = JobState.DONE


@dataclass
class ScaledJobController:
    """KEDA ScaledJob, default scaling strategy, for one research class.

    Every polling interval: maxScale = min(ceil(metric / target), maxReplicaCount);
    Jobs to create = maxScale − running, where running counts every unfinished Job
    (pending ones included). KEDA never deletes a running Job when the metric drops.
    """

    cls: str
    max_replica_count: int
    target: float = 1.0
    jobs: list[ResearchJob] = field(default_factory=list)

    def to_create(self, metric: float) -> int:
        running = sum(1 for j in self.jobs if j.state is not JobState.DONE)
        max_scale = min(math.ceil(metric / self.target - 1e-9), self.max_replica_count)
        return max(0, max_scale - running)

    def forget_done(self) -> None:
        self.jobs = [j for j in self.jobs if j.state is not JobState.DONE]
