"""The research work queue, SIMULATED in memory for the demo (no Redis, no worker process).

The real queue is Redis-backed (`scaler.research`, docs/research-queue.md); the demo must
run with nothing installed, so this module keeps the same states and transitions in plain
Python, with the state names of `scaler.research.model`:

    seeded ─► queued ──take──► running ──work finished──────────────────────────► done
                 ▲                │
                 │                └──pod preempted (SIGTERM) ─► still running (leased) until
                 │                   the pod is gone (grace period) ─► requeued, at the FRONT,
                 └──── take ◄──────── with its progress up to its last checkpoint

The scaler reads this queue as it reads the real one (`scaler.research.depth`, the chart's
`researchQueue.scaler`): `SimQueueReader` hands it each class's items waiting or running,
so it answers no more Jobs than that and an empty queue starts none.

What a research Job's worker does with it, as `gpu-pool-worker` does:
* when its pod has started, and again each time its item is done, it checks the class's
  slots (fail closed: the latest ScaledJob answer the KEDA driver got through gRPC; no
  answer, 0 slots or as many items running as slots → take nothing) and takes the front
  item of its class;
* it works on the item: the Job's remaining work is the item's work minus its checkpointed
  progress (`scaler.sim.kube` then runs the pod as for any Job: checkpoints, preemption);
* the item done is `done` (at most once: a second completion is a bug and raises); the
  pod preempted returns the item `requeued` once the pod is gone;
* a take that gets nothing ends the worker (exit 0) and with it the Job.

Not modelled: failures, lease expiry (node loss), cancel, dead letters (nothing in the
simulated pool fails); a new item starts at once in the same pod (no start-up time).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scaler.config import Config
from scaler.core.decision import QueueRead
from scaler.research.model import (
    DONE,
    OUTCOME_DONE,
    OUTCOME_PREEMPTED,
    QUEUED,
    REQUEUED,
    RUNNING,
    ClassCounts,
    Item,
    count_by_class,
)
from scaler.sim.kube import JobState, Ledger, Pod, PodPhase, ResearchClassSpec, ResearchJob

# The seeded batch: each class gets this many hours of its equal share of the lendable
# GPUs ((pool − reserve) / classes): about one night's worth, so the night drains most of it.
SEED_HOURS = 10.0

# Event kinds this module adds to the demo's events.jsonl.
SEEDED = "items-seeded"
TAKEN = "item-taken"
ITEM_DONE = "item-done"
ITEM_REQUEUED = "item-requeued"  # preempted, returned to the front with its checkpoint
WORKER_EXIT = "worker-exit"  # the worker's take got nothing (no item / no slot): the Job ends


# (t, kind, research class, detail) for events.jsonl.
QueueEvents = list[tuple[float, str, str, dict[str, float | int | str]]]


class QueueError(RuntimeError):
    """A transition the real queue refuses (e.g. a second completion): a bug here."""


@dataclass(eq=False)
class SimItem:
    """One unit of research work: `work_s` seconds of useful work on its class's GPUs."""

    id: str
    research_class: str
    gpus: int
    work_s: float
    saved_s: float = 0.0  # checkpointed progress, kept across preemptions
    state: str = QUEUED
    attempts: int = 0  # takes (GPS_ATTEMPT of the latest)
    preemptions: int = 0
    gpu_s: float = 0.0  # Σ attempt time (take → done / returned) × GPUs
    last_outcome: str = ""
    taken_at: float = math.nan

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.work_s / 3600.0

    @property
    def remaining_gpu_hours(self) -> float:
        return self.gpus * (self.work_s - self.saved_s) / 3600.0

    def as_item(self) -> Item:
        """The real queue's view of this item (for `count_by_class`)."""
        return Item(
            id=self.id,
            research_class=self.research_class,
            state=self.state,
            gpus=self.gpus,
            attempts=self.attempts,
            preemptions=self.preemptions,
            gpu_ms=round(self.gpu_s * 1000.0),
            last_outcome=self.last_outcome,
        )


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Per class, now: the real queue's counts plus what the demo counts on the way."""

    name: str
    queued: int  # waiting, never started
    requeued: int  # waiting again after a preempted attempt
    running: int  # taken (leased), including attempts whose pod is in its grace period
    done: int
    submitted: int
    requeue_events: int  # preempted-and-requeued transitions so far

    @property
    def waiting(self) -> int:
        """What a queue-length trigger reads: every waiting item (queued + requeued)."""
        return self.queued + self.requeued


@dataclass
class _Worker:
    pod: Pod  # the pod the worker runs in
    item: SimItem | None  # None: its last take got nothing, the Job ends
    items: int = 0  # items it took


@dataclass
class SimQueue:
    """Waiting items per class (front = next taken), the items by id, and the attempts of
    the research Jobs' workers. Single-threaded; no clock: `now` is passed in."""

    classes: tuple[str, ...]
    items: dict[str, SimItem] = field(default_factory=dict)
    # The latest ScaledJob answer per class (total slots): the worker's fail-closed check.
    slots: dict[str, int] = field(default_factory=dict)
    requeue_events: Counter[str] = field(default_factory=Counter)
    worker_exits: Counter[str] = field(default_factory=Counter)
    took_nothing: Counter[str] = field(default_factory=Counter)  # exits without any item
    completions: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._waiting: dict[str, deque[SimItem]] = {c: deque() for c in self.classes}
        self._workers: dict[ResearchJob, _Worker] = {}

    # ---- the queue's own transitions (scaler.research.queue: SUBMIT, TAKE, FINISH) ----------
    def submit(self, item: SimItem) -> None:
        if item.id in self.items:
            raise QueueError(f"item {item.id} submitted twice")
        item.state = QUEUED
        self.items[item.id] = item
        self._waiting[item.research_class].append(item)

    def take(self, research_class: str, now: float) -> tuple[SimItem | None, str]:
        """The worker's take: the front item if the class has a free slot (fail closed).
        Returns (item, "") or (None, why)."""
        slots = self.slots.get(research_class)
        if slots is None:
            return None, "no slot answer"
        if slots <= 0:
            return None, "0 slots"
        if (running := self.running(research_class)) >= slots:
            return None, f"{running} items running, {slots} slots"
        q = self._waiting[research_class]
        if not q:
            return None, "queue empty"
        it = q.popleft()
        it.state, it.taken_at = RUNNING, now
        it.attempts += 1
        return it, ""

    def finish(self, item: SimItem, now: float) -> None:
        """The attempt's command exited 0: done, at most once."""
        if item.state != RUNNING:
            raise QueueError(f"item {item.id} completed while {item.state}")
        item.state, item.last_outcome = DONE, OUTCOME_DONE
        item.saved_s = item.work_s
        item.gpu_s += item.gpus * (now - item.taken_at)
        self.completions[item.research_class] += 1

    def requeue(self, item: SimItem, now: float) -> None:
        """Returned after a preempted attempt: to the FRONT, checkpoint kept."""
        if item.state != RUNNING:
            raise QueueError(f"item {item.id} returned while {item.state}")
        item.state, item.last_outcome = REQUEUED, OUTCOME_PREEMPTED
        item.preemptions += 1
        item.gpu_s += item.gpus * (now - item.taken_at)
        self._waiting[item.research_class].appendleft(item)
        self.requeue_events[item.research_class] += 1

    # ---- counts -----------------------------------------------------------------------------
    def waiting(self, research_class: str) -> int:
        return len(self._waiting[research_class])

    def outstanding(self, research_class: str) -> int:
        """What the scaler reads of the real queue: items waiting plus items leased."""
        return self.waiting(research_class) + self.running(research_class)

    def running(self, research_class: str) -> int:
        return sum(
            1
            for w in self._workers.values()
            if w.item is not None and w.item.research_class == research_class
        )

    def counts(self) -> tuple[QueueCounts, ...]:
        real: dict[str, ClassCounts] = count_by_class(
            self.classes, (it.as_item() for it in self.items.values())
        )
        submitted = Counter(it.research_class for it in self.items.values())
        return tuple(
            QueueCounts(
                name=c,
                queued=real[c].queued,
                requeued=real[c].requeued,
                running=real[c].running,
                done=real[c].done,
                submitted=submitted[c],
                requeue_events=self.requeue_events[c],
            )
            for c in self.classes
        )

    def summary(self) -> dict[str, object]:
        """Per class, for summary.json: the real queue's `status --json` counts plus the
        demo's (submitted, preempted-and-requeued events, Jobs that took nothing)."""
        real = count_by_class(self.classes, (it.as_item() for it in self.items.values()))
        out: dict[str, object] = {}
        for c in self.classes:
            mine = [it for it in self.items.values() if it.research_class == c]
            waiting = [it for it in mine if it.state in (QUEUED, REQUEUED)]
            out[c] = {
                **real[c].as_json(),
                "submitted": len(mine),
                "submitted_gpu_hours": round(sum(it.gpu_hours for it in mine), 2),
                "done_gpu_hours": round(sum(it.gpu_hours for it in mine if it.state == DONE), 2),
                "waiting_gpu_hours": round(sum(it.remaining_gpu_hours for it in waiting), 2),
                "preempted_requeued": self.requeue_events[c],
                "taken": sum(it.attempts for it in mine),
                "worker_exits": self.worker_exits[c],
                "jobs_took_nothing": self.took_nothing[c],
            }
        return out

    # ---- the research Jobs' workers, around each step of the simulated cluster ------------
    def before_step(
        self, end: float, running: Sequence[ResearchJob], ledger: Ledger
    ) -> QueueEvents:
        """Workers whose item is done by `end` report it and take the next one (the same
        pod goes on, from the moment the item was done); one whose take gets nothing is
        left to finish, so the cluster's step completes its Job. Returns (t, kind, class,
        detail) events."""
        events: QueueEvents = []
        for job in running:
            w = self._workers.get(job)
            while w is not None and w.item is not None and job.finish_at() <= end:
                t, item = job.finish_at(), w.item
                w.item = None  # its lease ends: it no longer counts against the slots
                self.finish(item, t)
                events.append((t, ITEM_DONE, job.cls.name, self._detail(item)))
                nxt, why = self.take(job.cls.name, t)
                if nxt is None:
                    events.append(self._exit(job, w, t, why))
                    break
                # Useful work of the finished item, as complete_job books it for a Job.
                ledger.useful_gpu_s += job.cls.gpus * ledger.clip(job.run_from, t)
                w.item, w.items = nxt, w.items + 1
                job.run_from, job.work_s, job.saved_s = t, nxt.work_s, nxt.saved_s
                events.append((t, TAKEN, job.cls.name, self._detail(nxt)))
        return events

    def after_step(
        self,
        now: float,
        running: Sequence[ResearchJob],
        preempted: Iterable[ResearchJob],
        completed: Iterable[ResearchJob],
    ) -> QueueEvents:
        """Follow what the cluster did in one step (ending at `now`): preempted Jobs keep
        their item leased until their pod is gone, then return it; every Job whose pod
        just started (in `running`, binding order) takes an item or ends."""
        events: QueueEvents = []
        for job in completed:
            w = self._workers.pop(job, None)
            if w is not None and w.item is not None:  # not seen by before_step: a bug
                raise QueueError(f"Job of {job.cls.name} completed holding {w.item.id}")
        for job in preempted:
            w = self._workers.get(job)
            if w is not None and w.item is not None:
                w.item.saved_s = job.saved_s  # whole checkpoints kept (scaler.sim.kube)
        for job, w in list(self._workers.items()):
            # The worker reports `preempted` when its pod is gone (end of the grace period);
            # the Job controller has then re-created the pod.
            if job.pod is w.pod and w.pod.phase is not PodPhase.GONE:
                continue
            del self._workers[job]
            if w.item is not None:
                self.requeue(w.item, now)
                events.append((now, ITEM_REQUEUED, job.cls.name, self._detail(w.item)))
        for job in running:
            if job in self._workers or job.pod is None or job.state is not JobState.RUNNING:
                continue
            item, why = self.take(job.cls.name, now)
            w = _Worker(job.pod, item, 0 if item is None else 1)
            self._workers[job] = w
            if item is None:
                job.saved_s = job.work_s  # nothing to do: the Job ends once its pod started
                events.append(self._exit(job, w, now, why))
            else:
                job.work_s, job.saved_s = item.work_s, item.saved_s
                events.append((now, TAKEN, job.cls.name, self._detail(item)))
        return events

    def _exit(
        self, job: ResearchJob, w: _Worker, t: float, why: str
    ) -> tuple[float, str, str, dict[str, float | int | str]]:
        self.worker_exits[job.cls.name] += 1
        if w.items == 0:
            self.took_nothing[job.cls.name] += 1
        return (t, WORKER_EXIT, job.cls.name, {"why": why, "items": w.items})

    @staticmethod
    def _detail(it: SimItem) -> dict[str, float | int | str]:
        return {
            "item": it.id,
            "attempt": it.attempts,
            "gpu_hours": round(it.gpu_hours, 3),
            "checkpointed_gpu_hours": round(it.gpus * it.saved_s / 3600.0, 3),
        }


def seed_items(
    classes: Sequence[ResearchClassSpec], gpu_hours: Sequence[float], seed: int
) -> list[SimItem]:
    """Per class, as many items as `gpu_hours[i]` holds on average (at least one):
    round(gpu_hours / mean item GPU-hours). An item's duration is drawn like the bench's
    Jobs, lognormal around the class's median (`scaler.sim.kube.Backlog`), from its own
    seeded stream; so the count is fixed and the GPU-hours vary a little with the seed."""
    out: list[SimItem] = []
    for i, (c, budget) in enumerate(zip(classes, gpu_hours, strict=True)):
        rng = np.random.default_rng([seed, i, 11])
        for k in range(seed_count(c, budget)):
            hours = c.median_hours * float(np.exp(rng.normal(0.0, c.sigma)))
            work_s = max(60.0, hours * 3600.0)
            out.append(SimItem(f"{c.name}-{k + 1:04d}", c.name, c.gpus, work_s))
    return out


def seed_count(c: ResearchClassSpec, gpu_hours: float) -> int:
    """Items of class `c` that hold `gpu_hours` on average (lognormal mean)."""
    mean = c.gpus * c.median_hours * math.exp(c.sigma**2 / 2.0)
    return max(1, round(gpu_hours / mean))


def seed_budget(pool_gpus: int, reserve_gpus: int, n_classes: int, hours: float) -> float:
    """GPU-hours seeded per class: `hours` of an equal share of the lendable GPUs."""
    return hours * max(0, pool_gpus - reserve_gpus) / max(1, n_classes)


class SimQueueReader:
    """The scaler's queue reader (`scaler.research.depth.QueueReader`) over the simulated
    queue. The simulation publishes the counts from its own thread after each step; the
    scaler's control thread reads the latest (one dict swapped whole, never iterated
    while the simulation changes it). Before the first publish: no read (0 slots)."""

    def __init__(self) -> None:
        self._latest: dict[str, int] = {}

    def publish(self, queue: SimQueue) -> None:
        self._latest = {c: queue.outstanding(c) for c in queue.classes}

    async def read(self, cfg: Config) -> dict[str, QueueRead]:
        latest = self._latest
        return {
            c.name: QueueRead(latest[c.name])
            for c in cfg.research
            if c.queue is not None and c.name in latest
        }
