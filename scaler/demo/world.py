"""The simulated pool in simulated time: requests → router → vLLM replica model, on the
pods of the simulated cluster. Reuses the bench simulator (`scaler.sim`) for the replica
model, the router, the workload and the pod lifecycle; adds only the glue between them and
what the demo records. Single-threaded: everything here runs on the demo's event loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import numpy.typing as npt

from scaler.demo.cluster import DemoCluster
from scaler.demo.queue import QueueCounts
from scaler.sim.kube import JobState
from scaler.sim.pods import InfReplica, RepState
from scaler.sim.profile import ReplicaSpec
from scaler.sim.replica import ReplicaPool, RequestLog, Router
from scaler.sim.workload import Workload

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Sample:
    """One row of the day's record (every `record_s` simulated seconds)."""

    t: float  # simulated seconds since the start of the day
    rps: float  # request arrivals per second over the last record interval
    ready: int
    starting: int  # scheduled, loading the model
    pending: int  # inference pods waiting for GPUs
    draining: int
    desired: int | None  # the scaler's latest answer (through gRPC), None before the first
    inference_gpus: int
    research_gpus: int  # running research pods
    research_terminating_gpus: int
    research_running: int
    research_pending: int
    preemptions: int  # cumulative
    slo: float | None  # attainment so far
    # The simulated work queue, all classes (None without it): items waiting (queued +
    # requeued), running (taken), done.
    queue_waiting: int | None = None
    queue_running: int | None = None
    queue_done: int | None = None


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One class of the simulated work queue at one record time (queue.csv)."""

    t: float
    research_class: str
    queued: int
    requeued: int
    running: int
    done: int
    submitted: int
    requeue_events: int  # cumulative preempted-and-requeued transitions


def column(log: RequestLog, name: str) -> FloatArray:
    """A float column of the request log (`arrival`, `first_token`, ...), typed."""
    return cast(FloatArray, log.__dict__[name])


@dataclass
class SloTracker:
    """TTFT SLO over requests whose fate is known: first token in time, or deadline passed."""

    ttft_s: float
    decided: int = 0
    met: int = 0

    def advance(self, log: RequestLog, now: float) -> None:
        arrival = column(log, "arrival")[: log.n]
        end = int(np.searchsorted(arrival, now - self.ttft_s, side="right"))
        if end <= self.decided:
            return
        ttft = column(log, "first_token")[self.decided : end] - arrival[self.decided : end]
        self.met += int(np.count_nonzero(ttft <= self.ttft_s))  # NaN (no token yet) is a miss
        self.decided = end

    @property
    def attainment(self) -> float | None:
        return self.met / self.decided if self.decided else None


@dataclass
class World:
    """Everything that happens in the simulated pool, advanced in steps of `dt` seconds."""

    spec: ReplicaSpec
    workload: Workload
    cluster: DemoCluster
    slo: SloTracker
    dt: float = 2.0
    record_s: float = 300.0
    now: float = 0.0
    # Called when a replica starts serving / has exited (the owner runs its HTTP server
    # and keeps the scaler's target list).
    on_ready: Callable[[InfReplica], None] | None = None
    on_gone: Callable[[InfReplica], None] | None = None
    desired: int | None = None  # the latest answer the KEDA driver got, for the record
    records: list[Sample] = field(default_factory=list)
    queue_records: list[QueueSample] = field(default_factory=list)

    def __post_init__(self) -> None:
        w = self.workload
        self.log = RequestLog.of(w.arrival, w.prompt, w.output)
        self.pool = ReplicaPool(self.spec, self.cluster.pods.max_rows, self.log)
        self.router = Router()
        self._next_record = self.record_s
        self._recorded_arrivals = 0
        self._record_queue()  # the seeded queue at the start

    # ---- replica lifecycle ---------------------------------------------------------------
    def start_replica(self, rep: InfReplica) -> None:
        """A pod became Ready (on the row the lifecycle gave it): its engine starts
        (counters at 0) and takes requests."""
        self.pool.start(rep.row, self.now)
        if self.on_ready is not None:
            self.on_ready(rep)

    def drain(self, reps: list[InfReplica]) -> None:
        """Scale-down: stop routing to these replicas; they exit once idle."""
        for rep in reps:
            resend = self.pool.drain(rep.row)
            if resend:
                self.router.route(self.pool, resend)

    # ---- time ----------------------------------------------------------------------------
    def advance(self, until: float, max_steps: int = 1_000_000) -> None:
        """Step the pool up to `until` (at most `max_steps` steps: the caller stays live)."""
        steps = 0
        while self.now + self.dt <= until + 1e-9 and steps < max_steps:
            t = self.now
            i, j = self.workload.arrivals(t, t + self.dt)
            self.router.route(self.pool, np.arange(i, j))
            self.pool.step(t, self.dt)
            ch = self.cluster.step(t, self.dt, self.pool.idle)
            self.now = t + self.dt
            for rep in ch.gone:  # drained: its process exits
                self.pool.stop(rep.row)
                if self.on_gone is not None:
                    self.on_gone(rep)
            for rep in ch.ready:
                self.start_replica(rep)
            if self.router.held and self.pool.serving.any():
                self.router.route(self.pool, [])
            if self.now >= self._next_record - 1e-9:
                self._record()
                self._next_record += self.record_s
            steps += 1

    def _record(self) -> None:
        c = self.cluster
        self.slo.advance(self.log, self.now)
        arrived = self.arrived()
        rps = (arrived - self._recorded_arrivals) / self.record_s
        self._recorded_arrivals = arrived
        q = self._record_queue()
        self.records.append(
            Sample(
                t=self.now,
                rps=rps,
                ready=c.count(RepState.READY),
                starting=c.count(RepState.LOADING),
                pending=c.count(RepState.PENDING),
                draining=c.count(RepState.DRAINING),
                desired=self.desired,
                inference_gpus=c.inference_gpus(),
                research_gpus=c.research_gpus(JobState.RUNNING),
                research_terminating_gpus=c.research_gpus(JobState.EVICTED),
                research_running=c.jobs_in(JobState.RUNNING),
                research_pending=c.jobs_in(JobState.PENDING),
                preemptions=c.preemptions,
                slo=self.slo.attainment,
                queue_waiting=sum(qc.waiting for qc in q) if q else None,
                queue_running=sum(qc.running for qc in q) if q else None,
                queue_done=sum(qc.done for qc in q) if q else None,
            )
        )

    def _record_queue(self) -> tuple[QueueCounts, ...]:
        q = self.queue_counts()
        for qc in q:
            self.queue_records.append(
                QueueSample(
                    self.now,
                    qc.name,
                    qc.queued,
                    qc.requeued,
                    qc.running,
                    qc.done,
                    qc.submitted,
                    qc.requeue_events,
                )
            )
        return q

    def queue_counts(self) -> tuple[QueueCounts, ...]:
        """Per class, the simulated work queue now (empty without it)."""
        q = self.cluster.queue
        return () if q is None else q.counts()

    def arrived(self) -> int:
        """Requests that arrived so far."""
        a = column(self.log, "arrival")[: self.log.n]
        return int(np.searchsorted(a, self.now, side="left"))

    def rate_now(self, window_s: float = 300.0) -> float:
        """Arrivals per second over the last `window_s` simulated seconds."""
        a = column(self.log, "arrival")[: self.log.n]
        lo, hi = np.searchsorted(a, (self.now - window_s, self.now), side="left")
        return float(hi - lo) / max(min(window_s, self.now), 1e-9) if self.now > 0 else 0.0

    def waiting(self) -> float:
        """Requests queued in the engines and at the router."""
        q = sum(len(q) for q in self.pool.queues)
        return float(q + len(self.router.held))

    @staticmethod
    def hour(t: float) -> str:
        h = math.floor(t / 3600.0) % 24
        return f"{h:02d}:{math.floor(t % 3600.0 / 60.0):02d}"
