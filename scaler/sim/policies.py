"""The policies compared by the bench, all reading the same simulated pool.

* `ours`: the server's own decision path, every scrape interval: each replica's
  `EngineSample` as a `ScrapeResult` -> `core.tracker.TargetTracker` -> `core.cycle.step`
  (the function the server's control loop calls); KEDA hands `desired` to the HPA
  (AverageValue, target 1) and the research slots to the ScaledJobs.
* `static-peak`: replicas fixed at what the trace's peak needs; nothing lent.
* `queue-threshold`: production-stack's KEDA recipe: Prometheus trigger on
  `vllm:num_requests_waiting` (sum over pods), threshold 5, AverageValue, HPA defaults.
* `gpu-util-hpa`: HPA on GPU utilisation (DCGM busy fraction, per-pod average, target 0.7).
* `oracle`: knows the future demand exactly (the rate curve the arrivals follow, per
  minute): replicas = that rate / the calibrated per-replica capacity at the SLO, raised
  one reclaim lead time ahead and lowered only when demand stays low for the longest
  checkpoint interval; spec.replicas set directly (no HPA lag).

Baselines lend what their autoscaler leaves free through the same accounting
(`split_pool` with desired = their replica target), the same ScaledJobs and preemption,
so the harvest columns compare the inference side only. `static-peak` lends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scaler.config import Config
from scaler.core.accounting import Capacity, split_pool
from scaler.core.cycle import CycleInput, CycleState, step
from scaler.core.decision import Decision, ServiceDecision
from scaler.core.load import Endpoint, EngineSample, ScrapeJob, ScrapeResult, TargetPhase
from scaler.core.policy import top_reading
from scaler.core.tracker import TargetTracker
from scaler.sim.kube import Hpa, HpaBehavior

POLICY_NAMES = ("ours", "static-peak", "queue-threshold", "gpu-util-hpa", "oracle")


@dataclass(frozen=True, slots=True)
class LateAnswer:
    """A replica that did not answer /metrics in time: what it shows (its state when
    asked) and how long after the request its answer comes (None: never)."""

    sample: EngineSample
    after_s: float | None


@dataclass(frozen=True, slots=True)
class PoolView:
    """What a policy may observe at one instant (as scraped / as Kubernetes reports)."""

    now: float
    samples: Mapping[int, EngineSample]  # ready replica row -> its /metrics now (if it answered)
    busy: Mapping[int, float]  # ready replica row -> GPU busy fraction since last view
    starting: int  # inference pods pending or loading the model
    spec_replicas: int  # Deployment spec.replicas
    current: int  # replicas that exist (ready + starting)
    # Research pods being deleted (pod id -> time the deletion was asked), as the scaler's
    # pod watch sees them (deletionTimestamp − grace): its measured give-back.
    research_deleting: Mapping[str, float] = field(default_factory=dict)
    # Ready replica rows whose /metrics did not answer in time this scrape (not in
    # `samples`; engine.ScrapeFaults).
    unread: Mapping[int, LateAnswer] = field(default_factory=dict)

    @property
    def ready(self) -> int:
        return len(self.samples) + len(self.unread)


@dataclass
class Policy:
    name: str
    cfg: Config
    capacity_gpus: int
    uses_hpa: bool = True
    lends: bool = True
    reads_metrics: bool = False  # scrapes the engines' /metrics (engine.ScrapeFaults apply)
    behavior: HpaBehavior = field(default_factory=HpaBehavior)
    slots: dict[str, int] = field(default_factory=dict)
    reserve_now: int = -1  # GPUs the accounting keeps free now (-1: the configured floor)
    decided_by: str = ""  # what set the target this cycle ("" for policies without signals)

    @property
    def svc_name(self) -> str:
        return self.cfg.inference[0].name

    def control(self, view: PoolView) -> None:
        """Every scrape interval (5 s)."""

    def hpa_recommendation(self, view: PoolView, hpa: Hpa) -> int | None:
        """At each HPA sync: the HPA's raw recommendation (None = keep)."""
        return None

    def direct_replicas(self, view: PoolView) -> int | None:
        """Policies that set spec.replicas themselves (no HPA)."""
        return None

    def give_back_note(self) -> str:
        """The research give-back this policy plans now ("" if it plans none)."""
        return ""

    def lend(self, view: PoolView, desired: int) -> None:
        """Research slots from the shared accounting, with `desired` as the inference target."""
        if not self.lends:
            self.slots = {c.name: 0 for c in self.cfg.research}
            return
        svc = self.cfg.inference[0]
        d = ServiceDecision(
            name=svc.name,
            namespace=svc.namespace,
            desired=desired,
            current=view.current,
            ready=view.ready,
            starting=view.starting,
            reason=self.name,
            fresh=True,
            gpus_per_replica=svc.gpusPerReplica,
        )
        _, research = split_pool(
            self.cfg,
            {svc.name: d},
            Capacity(self.capacity_gpus),
            self.cfg.pool.reserveGPUs,
            ready_for_research=True,
        )
        self.slots = {k: v.slots for k, v in research.items()}


@dataclass
class Ours(Policy):
    cycle: CycleState = field(default_factory=CycleState)
    tracker: TargetTracker = field(default_factory=TargetTracker)
    reads_metrics: bool = True
    desired: int | None = None
    decision: Decision | None = None
    # Requests kept open for a late answer (scrape.lateAnswerSeconds), per replica row:
    # the sample it carries, when it comes and how long after the request.
    late: dict[int, tuple[EngineSample, float, float]] = field(default_factory=dict)
    # Simulated wall clock = this + view.now (Unix seconds): the forecast's time of day and
    # day of week, as the server takes them from its clock.
    calendar_offset: float = 0.0

    def control(self, view: PoolView) -> None:
        svc = self.cfg.inference[0]
        # What the server's discovery and scraper would hand over: every ready replica
        # scraped now (one that did not answer as a timed-out scrape), starting pods
        # discovered but not serving yet.
        serving = [*view.samples, *view.unread]
        endpoints = [Endpoint(f"replica-{row}", TargetPhase.SERVING) for row in serving]
        endpoints += [Endpoint(f"starting-{i}", TargetPhase.STARTING) for i in range(view.starting)]
        results = {row: self._scrape(row, s, view.now) for row, s in view.samples.items()}
        results |= {row: self._scrape(row, late, view.now) for row, late in view.unread.items()}
        self.late = {row: v for row, v in self.late.items() if row in results}  # pods gone
        by_address = {f"replica-{row}": r for row, r in results.items()}
        targets = {svc.name: self.tracker.update(svc.name, endpoints, by_address)}
        wall = self.calendar_offset + view.now
        deleting = {k: self.calendar_offset + t for k, t in view.research_deleting.items()}
        capacity = Capacity(self.capacity_gpus, research_deleting=deleting)
        inp = CycleInput(self.cfg, targets, capacity, view.now, wall, calendar=wall)
        self.decision, self.cycle = step(inp, self.cycle)
        sd = self.decision.services[svc.name]
        self.desired = sd.desired
        self.decided_by = sd.decided_by
        readings = [v for v in sd.signals if not v.abstain]
        if sd.decided_by in ("max", "min", "stabilization") and readings:
            self.decided_by = f"{sd.decided_by} ({top_reading(readings).signal})"
        assert self.decision.pool is not None
        self.reserve_now = self.decision.pool.reserve_gpus
        self.slots = {k: v.slots for k, v in self.decision.research.items()}

    def _scrape(self, row: int, answer: EngineSample | LateAnswer, now: float) -> ScrapeResult:
        """One replica's scrape as `ingest.scrape.Scraper` returns it: a request kept open
        from an earlier cycle stands for this one's (answered by now, or still a timeout);
        else the replica answers in time, or not, and the request is kept open when its
        answer will come within `scrape.lateAnswerSeconds`."""
        job = ScrapeJob(f"replica-{row}")
        sc = self.cfg.scrape
        kept = self.late.get(row)
        if kept is None and isinstance(answer, EngineSample):
            return ScrapeResult(job, answer, None, now, 0.0)
        if kept is None:
            assert isinstance(answer, LateAnswer)
            after = answer.after_s
            if after is not None and after <= sc.timeoutSeconds + sc.lateAnswerSeconds:
                kept = self.late[row] = (answer.sample, now + after, after)
        if kept is not None and kept[1] <= now:
            del self.late[row]
            return ScrapeResult(job, kept[0], None, kept[1], kept[2])
        why = f"read timeout after {sc.timeoutSeconds:g} s"
        return ScrapeResult(job, None, why, now, sc.timeoutSeconds, "timeout")

    def give_back_note(self) -> str:
        gb = None if self.decision is None else self.decision.give_back
        return "" if gb is None else gb.note

    def hpa_recommendation(self, view: PoolView, hpa: Hpa) -> int | None:
        sd = None if self.decision is None else self.decision.services[self.svc_name]
        value = None if sd is None else sd.keda_value
        if value is None:
            return None  # gRPC UNAVAILABLE: KEDA keeps the current count (fallback)
        return hpa.recommend_average_value(float(value), 1.0, view.spec_replicas)


@dataclass
class StaticPeak(Policy):
    replicas: int = 1

    def direct_replicas(self, view: PoolView) -> int | None:
        return self.replicas

    def control(self, view: PoolView) -> None:
        self.slots = {c.name: 0 for c in self.cfg.research}


@dataclass
class QueueThreshold(Policy):
    threshold: float = 5.0
    prom_interval_s: float = 15.0
    reads_metrics: bool = True
    _prom_value: float = 0.0
    _prom_at: float = -math.inf

    def control(self, view: PoolView) -> None:
        if view.now - self._prom_at >= self.prom_interval_s:  # Prometheus scrape
            # A pod whose scrape failed has its series marked stale at once: the sum is
            # over the pods that answered.
            self._prom_value = sum(s.waiting for s in view.samples.values())
            self._prom_at = view.now
        self.lend(view, view.spec_replicas)

    def hpa_recommendation(self, view: PoolView, hpa: Hpa) -> int | None:
        return hpa.recommend_average_value(self._prom_value, self.threshold, view.spec_replicas)


@dataclass
class GpuUtilHpa(Policy):
    target: float = 0.7
    _acc: dict[int, list[float]] = field(default_factory=dict)

    def control(self, view: PoolView) -> None:
        for row, b in view.busy.items():
            self._acc.setdefault(row, []).append(b)
        self.lend(view, view.spec_replicas)

    def hpa_recommendation(self, view: PoolView, hpa: Hpa) -> int | None:
        ready = [row for row in view.busy if row in self._acc]  # DCGM: not /metrics
        if not ready:
            return None
        avg = float(np.mean([np.mean(self._acc[r]) for r in ready]))
        self._acc = {}
        return hpa.recommend_per_pod(avg, self.target, len(ready), view.spec_replicas)


@dataclass
class Oracle(Policy):
    need_at: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    t0: float = 0.0  # time of need_at[0]; one entry per minute
    uses_hpa: bool = False

    def target(self, now: float) -> int:
        i = int((now - self.t0) // 60)
        i = min(max(i, 0), self.need_at.size - 1)
        return int(self.need_at[i])

    def direct_replicas(self, view: PoolView) -> int | None:
        return self.target(view.now)

    def control(self, view: PoolView) -> None:
        self.lend(view, self.target(view.now))


def oracle_need(
    rate_t: npt.NDArray[np.float64],
    rate: npt.NDArray[np.float64],
    t0: float,
    t1: float,
    per_replica_rps: float,
    lead_s: float,
    lo: int,
    hi: int,
) -> npt.NDArray[np.int64]:
    """Replicas per minute from [t0, t1): the demand the arrivals follow (the workload's rate
    curve, per minute) at the calibrated per-replica capacity (which already covers the
    bursts inside a minute), maximised over the next `lead_s`."""
    starts = np.arange(t0, t1, 60.0)
    lam = np.interp(starts, rate_t, rate)
    need = np.ceil(lam / per_replica_rps - 1e-9).astype(np.int64)
    k = max(1, math.ceil(lead_s / 60.0)) + 1
    padded = np.concatenate((need, np.full(k, need[-1] if need.size else 0)))
    ahead = np.lib.stride_tricks.sliding_window_view(padded, k)[: need.size].max(axis=1)
    return np.clip(ahead, lo, hi).astype(np.int64)
