"""The simulated Kubernetes side of the demo, in simulated time: the pool's pods
(`scaler.sim.pods`, the bench's own lifecycle: scheduler with priority preemption, cold
starts, drains, research Jobs that checkpoint and are re-created after preemption), the
HPA with the chart's behavior and KEDA's ScaledJob controller. This module only adds what
the demo keeps around them: the HPA's inputs, the events it records, the GPU time lent to
research, and (optionally) the simulated research work queue the Jobs take items from
(`scaler.demo.queue`). It does no I/O and reads no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scaler.demo.queue import SEEDED, SimItem, SimQueue
from scaler.sim.kube import Hpa, HpaBehavior, JobState, Ledger, ResearchClassSpec
from scaler.sim.pods import Changes, InfReplica, Lifecycle, Pods, RepState


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # simulated seconds since the start of the run
    # scale | replica-ready | replica-gone | jobs-created | preempt | job-done, and with the
    # simulated queue: items-seeded | item-taken | item-done | item-requeued | worker-exit
    kind: str
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
        items: list[SimItem] | None = None,
    ) -> None:
        # Research pods do not checkpoint on SIGTERM: they hold their GPUs for the grace
        # period and lose the work since their last periodic checkpoint.
        lifecycle = Lifecycle(gpus_per_replica, cold_start_s, startup_s, grace_s)
        self.pods = Pods(
            pool_gpus=pool_gpus,
            gpus_per_node=gpus_per_node,
            lifecycle=lifecycle,
            classes=classes,
            seed=seed,
            ledger=Ledger(0.0, math.inf),
        )
        self.service = service
        self.classes = {c.name: c for c in classes}
        self.hpa = Hpa(min_replicas, max_replicas, hpa)
        self.events: list[Event] = []
        self.research_gpu_s = 0.0  # GPU time held by running research pods (harvested)
        self.jobs_created = 0
        # The simulated work queue (None: every Job draws its work from a never-ending
        # backlog, the bench's model).
        self.queue: SimQueue | None = None
        if items is not None:
            self.queue = SimQueue(tuple(c.name for c in classes))
            for it in items:
                self.queue.submit(it)
            for c in classes:
                mine = [it for it in items if it.research_class == c.name]
                detail: dict[str, float | int | str] = {
                    "n": len(mine),
                    "gpu_hours": round(sum(it.gpu_hours for it in mine), 2),
                }
                self.events.append(Event(0.0, SEEDED, c.name, detail))

    # ---- the Deployment and its HPA ------------------------------------------------------
    def start_with(self, n: int, now: float) -> list[InfReplica]:
        """Yesterday's Deployment: `n` replicas already Ready at the start (rows given)."""
        ready = self.pods.start_ready(n, now)
        if len(ready) < n:
            raise ValueError(f"{n} replicas do not fit in {self.pods.cluster.gpus} GPUs")
        return ready

    def hpa_sync(self, value: float, target: float, now: float, *, why: str) -> list[InfReplica]:
        """The HPA reads the external metric (AverageValue) and sets `.spec.replicas`.

        Returns the Ready replicas a scale-down set draining (the caller drains them)."""
        current = self.pods.spec_replicas
        want = self.hpa.sync(now, current, self.hpa.recommend_average_value(value, target, current))
        if want == current:
            return []
        self.events.append(
            Event(now, "scale", self.service, {"from": current, "to": want, "why": why})
        )
        return self.pods.scale(want, now)

    @property
    def spec_replicas(self) -> int:
        return self.pods.spec_replicas

    @property
    def replicas(self) -> list[InfReplica]:
        return self.pods.replicas

    def count(self, state: RepState) -> int:
        return self.pods.count(state)

    # ---- research: KEDA's ScaledJob controller ------------------------------------------
    def scaled_job_poll(self, research_class: str, metric: float, now: float) -> int:
        """One ScaledJob poll with `metric` (total slots): creates maxScale − unfinished Jobs.

        With the queue the scaler's trigger stays alone (the chart's researchQueue.scaler):
        the scaler already counts the class's items in its answer. That answer is also what
        the Jobs' workers check before they take (fail closed)."""
        detail: dict[str, float | int | str] = {}
        if self.queue is not None:
            self.queue.slots[research_class] = math.floor(metric + 1e-9)
            detail = {
                "slots": metric,
                "waiting": self.queue.waiting(research_class),
                "outstanding": self.queue.outstanding(research_class),
            }
        n = self.pods.create_jobs(research_class, metric, now)
        if n:
            self.jobs_created += n
            self.events.append(Event(now, "jobs-created", research_class, {"n": n, **detail}))
        return n

    def unfinished(self, research_class: str) -> int:
        return self.pods.unfinished(research_class)

    def jobs_in(self, state: JobState, research_class: str | None = None) -> int:
        return self.pods.jobs_in(state, research_class)

    # ---- GPUs and research accounting ---------------------------------------------------
    def inference_gpus(self) -> int:
        """GPUs held by inference pods (loading, ready, draining)."""
        return self.pods.cluster.held["inference"]

    def research_gpus(self, state: JobState = JobState.RUNNING) -> int:
        """GPUs held by research pods that are running (or, EVICTED: in their grace period)."""
        return self.pods.research_gpus(state)

    @property
    def ledger(self) -> Ledger:
        return self.pods.ledger

    def useful_gpu_s(self, now: float) -> float:
        """Research work kept: checkpointed or completed, plus the progress of running Jobs."""
        running = sum(j.cls.gpus * j.progress(now) for j in self.pods.running)
        return self.ledger.useful_gpu_s + running

    @property
    def preemptions(self) -> int:
        return self.ledger.preemptions

    @property
    def jobs_done(self) -> int:
        return self.ledger.completed

    # ---- time ------------------------------------------------------------------------------
    def step(self, now: float, dt: float, idle: Callable[[int], bool]) -> Changes:
        """Advance to `now + dt` (`idle(row)`: a draining replica's process has finished).
        Returns what changed: replicas gone (stop their rows), Ready (start serving)."""
        end = now + dt
        if self.queue is not None:  # workers done with an item go on to the next one
            for t, kind, cls, qd in self.queue.before_step(end, self.pods.running, self.ledger):
                self.events.append(Event(t, kind, cls, qd))
        ch = self.pods.step(end, idle)
        for job, lost in ch.preempted:
            detail: dict[str, float | int | str] = {"gpus": job.cls.gpus, "lost_gpu_s": lost}
            self.events.append(Event(end, "preempt", job.cls.name, detail))
        for rep in ch.gone:
            self.events.append(Event(end, "replica-gone", self.service, {"pod": rep.uid}))
        for rep in ch.ready:
            self.events.append(Event(end, "replica-ready", self.service, {"pod": rep.uid}))
        for job in ch.completed:
            self.events.append(Event(end, "job-done", job.cls.name, {"gpus": job.cls.gpus}))
        if self.queue is not None:
            preempted = [job for job, _ in ch.preempted]
            for t, kind, cls, qd in self.queue.after_step(
                end, self.pods.running, preempted, ch.completed
            ):
                self.events.append(Event(t, kind, cls, qd))
        self.research_gpu_s += sum(j.cls.gpus for j in self.pods.running) * dt
        return ch
