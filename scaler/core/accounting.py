"""Pool accounting: how many research Jobs of each class fit beside inference. Pure, no I/O.

    inference_gpus = Σ over configured services of max(desired, current) × gpusPerReplica
    headroom       = max(0, capacity − inference_gpus − reserve − foreign)
    slots          = headroom split across research classes (priority, weight, maxJobs,
                     whole Jobs of gpusPerJob)

Research fails closed (every class 0 slots, the reason recorded) whenever the inputs could
make us lend a GPU inference needs: capacity unknown, any service without fresh data or
without a decision, or no complete control cycle yet. It is never an error towards KEDA.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scaler.config import Config, ResearchClass
from scaler.core.decision import PoolSplit, QueueRead, ResearchDecision, ServiceDecision


@dataclass(frozen=True, slots=True)
class Capacity:
    """The pool's GPUs as one capacity source saw them."""

    total_gpus: int  # allocatable GPUs on Ready, schedulable pool nodes (or the static value)
    foreign_gpus: int = 0  # GPUs held on those nodes by pods of neither pool side
    source: str = "static"  # "static" | "nodes"
    observed_at: float | None = None  # clock time the source last confirmed this view
    nodes: int = 0  # pool nodes counted (0 for a static source)
    detail: str = ""  # human summary for explain/logs, e.g. "3 nodes; 1 NotReady"
    # Research pods being deleted (pod uid -> wall time the deletion was requested), as the
    # pod watch sees them; None: pods not watched (core.giveback learns nothing then).
    research_deleting: Mapping[str, float] | None = None
    # GPUs no pod holds on each counted node, largest first (requests of every pod bound
    # there and not terminated); None: pods not watched (needs subtractForeignPods). Free
    # GPUs split across nodes fit no replica: see `replica_room`.
    free_by_node: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.total_gpus < 0 or self.foreign_gpus < 0:
            raise ValueError(f"negative GPU count in {self!r}")


def inference_gpus(cfg: Config, decisions: Mapping[str, ServiceDecision]) -> int:
    """GPUs inference holds or asks for: Σ max(desired, current) × gpusPerReplica.

    A service whose desired is None counts its current replicas; a configured service with no
    decision at all counts 0 here (the split fails closed on it anyway).
    """
    total = 0
    for svc in cfg.inference:
        d = decisions.get(svc.name)
        if d is None:
            continue
        total += max(0, d.held) * svc.gpusPerReplica
    return total


def _fail_closed_reason(
    cfg: Config,
    decisions: Mapping[str, ServiceDecision],
    capacity: Capacity | None,
    ready_for_research: bool,
) -> str | None:
    if not ready_for_research:
        return "no complete control cycle yet"
    if capacity is None:
        return "pool capacity unknown"
    for svc in cfg.inference:
        d = decisions.get(svc.name)
        if d is None:
            return f"service {svc.name!r} has no decision"
        if d.desired is None:
            return f"service {svc.name!r} has no data"
        if not d.fresh:
            return f"service {svc.name!r} data is stale or partial"
    return None


def allocate(classes: list[ResearchClass], budget: int) -> dict[str, int]:
    """Split `budget` GPUs into whole Jobs per class. Deterministic.

    Priorities are served strictly in order (higher first); a lower priority only gets what
    the higher ones cannot use. Within one priority, Jobs are handed out one at a time to
    the class with the least GPUs per unit of weight so far (start-time fair queuing), ties
    going to the larger gpusPerJob (packs big Jobs before small ones fill the gaps), then to
    config order. A class leaves the round when it reaches maxJobs or its next Job no longer
    fits; the others keep going, so GPUs one class cannot use go to those that can. Serving
    the least-served class first, not the one that would stay least served, means a class of
    large Jobs is not starved by a class of small ones that nibbles its share away.
    """
    slots = {c.name: 0 for c in classes}
    order = {c.name: i for i, c in enumerate(classes)}
    for prio in sorted({c.priority for c in classes}, reverse=True):
        level = [c for c in classes if c.priority == prio]
        demand = sum(c.maxJobs * c.gpusPerJob for c in level)
        if demand <= budget:  # everyone fits up to maxJobs: what the loop would reach
            for c in level:
                slots[c.name] = c.maxJobs
            budget -= demand
            continue
        # (GPUs given / weight, -gpusPerJob, config index, class)
        heap = [(0.0, -c.gpusPerJob, order[c.name], c) for c in level if c.maxJobs > 0]
        heapq.heapify(heap)
        while heap and budget > 0:
            _, neg_g, idx, c = heapq.heappop(heap)
            if c.gpusPerJob > budget:
                continue  # the budget only shrinks: this class is done
            slots[c.name] += 1
            budget -= c.gpusPerJob
            if slots[c.name] < c.maxJobs:
                heapq.heappush(heap, (slots[c.name] * c.gpusPerJob / c.weight, neg_g, idx, c))
    return slots


def split_pool(
    cfg: Config,
    decisions: Mapping[str, ServiceDecision],
    capacity: Capacity | None,
    reserve_gpus: int,
    *,
    ready_for_research: bool,
    withhold: Mapping[str, int] | None = None,
    queued: Mapping[str, QueueRead] | None = None,
) -> tuple[PoolSplit, dict[str, ResearchDecision]]:
    """The pool split and each research class's total slots (KEDA subtracts running Jobs).

    `withhold` (from the forecast, per class): GPUs of today's headroom that inference is
    predicted to need back within the class's checkpoint interval. Classes are served as
    usual, then capped so that for each class c, the GPUs lent to c and to every class with
    a checkpoint interval at least as long fit in headroom − withhold[c]: a Job is started
    only where it can save a checkpoint before it would be preempted. Only ever lowers.

    `queued` (per class with a `queue`): its outstanding items cap its Jobs like a lower
    maxJobs, so the GPUs an empty queue cannot use go to the other classes; a class whose
    queue was not read (absent from `queued`, or an error) gets 0 slots.
    """
    if reserve_gpus < 0:
        raise ValueError(f"reserve_gpus must be >= 0, got {reserve_gpus}")
    inf = inference_gpus(cfg, decisions)
    foreign = capacity.foreign_gpus if capacity is not None else 0
    total = capacity.total_gpus if capacity is not None else None
    headroom = max(0, total - inf - reserve_gpus - foreign) if total is not None else 0
    reason = _fail_closed_reason(cfg, decisions, capacity, ready_for_research)
    free = capacity.free_by_node if capacity is not None else None

    reads = {c.name: _queue_read(c, queued) for c in cfg.research}
    research: dict[str, ResearchDecision] = {}
    if reason is not None:
        for c in cfg.research:
            research[c.name] = _with_queue(
                ResearchDecision(c.name, 0, c.gpusPerJob, f"fail closed: {reason}"), reads[c.name]
            )
        split = PoolSplit(
            total, inf, reserve_gpus, foreign, headroom, 0, fail_closed=reason, free_by_node=free
        )
        return split, research

    slots = allocate([_queue_capped(c, reads[c.name]) for c in cfg.research], headroom)
    withheld = _withhold(cfg, slots, headroom, withhold or {})
    used = sum(slots[c.name] * c.gpusPerJob for c in cfg.research)
    left = headroom - used
    for c in cfg.research:
        n = slots[c.name]
        read = reads[c.name]
        if c.maxJobs == 0:
            why = "maxJobs is 0"
        elif read is not None and read.items is None:
            why = f"work queue unread ({read.error}): no Job without queued work"
        elif read is not None and read.items is not None and n >= read.items < c.maxJobs:
            why = f"capped at {read.items} queued item(s) (waiting + leased)"
        elif n >= c.maxJobs:
            why = f"capped at maxJobs {c.maxJobs}"
        elif headroom == 0:
            why = (
                f"no headroom: capacity {total} − inference {inf} − reserve {reserve_gpus}"
                f" − foreign {foreign}"
            )
        else:
            why = f"{left} GPU(s) left < {c.gpusPerJob} per Job"
        if withheld[c.name]:
            why = (
                f"forecast withholds {withheld[c.name]} Job(s): inference needs "
                f"{(withhold or {}).get(c.name, 0)} more GPU(s) within its "
                f"{c.checkpointIntervalSeconds:.0f} s checkpoint interval"
            )
        research[c.name] = _with_queue(
            ResearchDecision(
                c.name,
                n,
                c.gpusPerJob,
                f"{n} × {c.gpusPerJob} GPU(s) of {headroom} headroom (priority {c.priority},"
                f" weight {c.weight:g}); {why}",
                withheld_slots=withheld[c.name],
            ),
            read,
        )
    held_back = sum(withheld[c.name] * c.gpusPerJob for c in cfg.research)
    split = PoolSplit(
        total,
        inf,
        reserve_gpus,
        foreign,
        headroom,
        used,
        None,
        forecast_withheld_gpus=held_back,
        free_by_node=free,
    )
    return split, research


def _queue_read(c: ResearchClass, queued: Mapping[str, QueueRead] | None) -> QueueRead | None:
    """The class's queue read; None for a class without a queue."""
    if c.queue is None:
        return None
    read = (queued or {}).get(c.name)
    return read if read is not None else QueueRead(None, "not read yet")


def _queue_capped(c: ResearchClass, read: QueueRead | None) -> ResearchClass:
    if read is None:
        return c
    return c.model_copy(update={"maxJobs": min(c.maxJobs, read.items or 0)})


def _with_queue(r: ResearchDecision, read: QueueRead | None) -> ResearchDecision:
    if read is None:
        return r
    return replace(r, queued_items=read.items, queue_error=read.error, queue_warning=read.warning)


def _withhold(
    cfg: Config, slots: dict[str, int], headroom: int, withhold: Mapping[str, int]
) -> dict[str, int]:
    """Lower `slots` in place under the forecast's per-class limits; returns what each lost.

    Longest checkpoint interval first: its limit covers itself; a shorter one's limit
    covers itself and every longer one (their Jobs would be preempted as soon)."""
    lost = {c.name: 0 for c in cfg.research}
    order = sorted(cfg.research, key=lambda c: -c.checkpointIntervalSeconds)
    used = 0
    for c in order:
        keep = max(0, headroom - max(0, withhold.get(c.name, 0)))
        room = max(0, keep - used)
        fit = room // c.gpusPerJob
        if slots[c.name] > fit:
            lost[c.name] = slots[c.name] - fit
            slots[c.name] = fit
        used += slots[c.name] * c.gpusPerJob
    return lost


class HarvestMeter:
    """Cumulative GPU-hours lent to research (the reference deployment's "harvested" figure).

    Each observation's GPUs are held until the next one (left Riemann sum), so a cycle's
    split counts for the time until the next cycle. A gap longer than `max_interval_seconds`
    (a stalled loop, a suspended process) only counts that long: we do not know what was
    lent meanwhile, and we never invent harvest. A clock going backwards adds nothing.
    """

    def __init__(self, max_interval_seconds: float = 60.0) -> None:
        if max_interval_seconds <= 0:
            raise ValueError("max_interval_seconds must be > 0")
        self._max = max_interval_seconds
        self._last: tuple[float, int] | None = None
        self._gpu_seconds = 0.0

    def observe(self, research_gpus: int, now: float) -> float:
        """Record that `research_gpus` are lent from `now` on; returns total GPU-hours."""
        if research_gpus < 0:
            raise ValueError(f"research_gpus must be >= 0, got {research_gpus}")
        if self._last is not None:
            t0, g0 = self._last
            if now < t0:
                # Clock went backwards: count nothing, keep the later timestamp.
                self._last = (t0, research_gpus)
                return self.gpu_hours
            self._gpu_seconds += g0 * min(now - t0, self._max)
        self._last = (now, research_gpus)
        return self.gpu_hours

    @property
    def gpu_hours(self) -> float:
        return self._gpu_seconds / 3600.0
