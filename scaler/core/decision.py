"""The immutable Decision snapshot: everything the control loop concluded in one cycle.

RPC handlers, the HTTP status endpoints and `explain` only read the latest snapshot; none
of them scrape or compute. A new snapshot replaces the old one atomically (one reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaler.config import Config
    from scaler.core.giveback import Planned


@dataclass(frozen=True, slots=True)
class SignalVerdict:
    """One policy signal's reading and the replica count it asks for."""

    signal: str  # "queue" | "kv-cache" | "concurrency" | "throughput" | "slo" | "ramp" | "forecast"
    value: float  # observed value (per replica, or fraction)
    target: float  # configured threshold
    replicas: int  # replicas this signal alone asks for
    abstain: bool = False  # no reading this cycle (e.g. no token rate yet): holds, never lowers
    note: str = ""  # short qualifier shown by explain, e.g. "capped during cold start"
    # Replicas the load alone needs, however many exist (None: `replicas`). `replicas` may
    # hold the current count (a queue in the hold zone, a breach being absorbed); the
    # forecast's history records `need`, so replicas the forecast added never come back as
    # tomorrow's need (a ratchet: on ServeGen it held 33 % more GPU-hours than reactive).
    need: int | None = None
    # What the scale-down window keeps of this signal (None: `replicas`; never above it):
    # the ask of the averaged load (scaleDown.smoothingSeconds), or for the slo signal
    # holding an answered breach, the request rate's ask (the hold is its own).
    calm: int | None = None


@dataclass(frozen=True, slots=True)
class SloStatus:
    """A service's latency objective and how it is doing (services with `slo:` only)."""

    ttft_s: float  # objective: first token within this long
    objective: float  # share of requests that must meet it (0-1)
    window_s: float
    attainment: float | None  # measured over the window; None: too few requests yet
    requests: float  # requests (first tokens) in the window
    capacity_rps: float | None  # learned requests/s one ready replica serves at the objective
    requests_per_s: float | None  # first tokens per second over the window
    itl_s: float | None = None  # inter-token latency objective, if set
    itl_attainment: float | None = None
    # The exported bucket that holds ttft_s strictly inside (attainment interpolated there);
    # None: ttft_s is a bucket bound (measured exactly) or no histogram this cycle.
    bucket: tuple[float, float] | None = None
    capacity_source: str | None = None  # where capacity_rps was read (core.slo.Learned.source)


@dataclass(frozen=True, slots=True)
class ServiceDecision:
    name: str
    namespace: str
    desired: int | None  # None: no fresh data -> KEDA gets UNAVAILABLE (fallback applies)
    current: int  # replicas that exist (ready + starting + unhealthy)
    ready: int
    starting: int
    reason: str  # human explanation: which signal decided, or why we hold
    signals: tuple[SignalVerdict, ...] = ()
    fresh: bool = False  # data complete and fresh this cycle
    gpus_per_replica: int = 1
    decided_by: str = ""  # signal that set `desired`, or "min"/"max"/"stabilization"/"stale"/...
    recommended: int | None = None  # max over signals, clamped, before stabilization and steps
    hpa_note: str = ""  # set when the HPA's default 10 % tolerance would swallow this change
    slo: SloStatus | None = None
    forecast_note: str = ""  # pool.forecast on: what it is based on, or why it is not used
    # Set when requests wait, no signal reads the queue and the target does not rise: a
    # config that lets the service hold or shrink with a backlog (policy.unread_queue_note).
    queue_note: str = ""

    @property
    def held(self) -> int:
        """Replicas this service holds or is about to hold: the target when it is above what
        exists, else what exists (no target: what exists). The pool's accounting, the
        reserve's need and the research withholding all count this."""
        return self.current if self.desired is None else max(self.desired, self.current)

    @property
    def keda_value(self) -> int | None:
        """What KEDA is told: the target, or None for UNAVAILABLE when there is no target
        or no replica was read at all (then KEDA's fallback decides, not an echo of a held
        value; with some replicas read the target may still rise, policy.decide)."""
        if self.desired is None or (not self.fresh and self.ready == 0):
            return None
        return self.desired


@dataclass(frozen=True, slots=True)
class ResearchDecision:
    name: str
    slots: int  # total Jobs of this class that fit (KEDA subtracts running ones)
    gpus_per_job: int
    reason: str
    withheld_slots: int = 0  # slots the forecast held back (inference needs the GPUs soon)
    # A class fed by the work queue (config `queue`): its items waiting + leased, which cap
    # its slots; None with `queue_error` set: unread, 0 slots. Both None: no queue.
    queued_items: int | None = None
    queue_error: str | None = None
    queue_warning: str | None = None  # counted, but its credentials' re-reads fail (depth)


@dataclass(frozen=True, slots=True)
class QueueRead:
    """One read of a research class's work queue: outstanding items (waiting + leased), or
    why there is no number (`items` None). Never a 0 made up for a failed read."""

    items: int | None
    error: str | None = None
    # A count read with credentials that could not be read again (the workers' Secret):
    # right now, but at risk when the password rotates. Only beside items.
    warning: str | None = None

    def __post_init__(self) -> None:
        if (self.items is None) == (self.error is None):
            raise ValueError("a QueueRead has items or an error, not both or neither")
        if self.warning is not None and self.items is None:
            raise ValueError("a QueueRead warning goes with items, an unread queue has its error")
        if self.items is not None and self.items < 0:
            raise ValueError(f"negative item count {self.items}")


@dataclass(frozen=True, slots=True)
class PoolSplit:
    capacity: int | None  # None: unknown -> research fails closed
    inference_gpus: int
    reserve_gpus: int
    foreign_gpus: int
    headroom_gpus: int  # max(0, capacity - inference - reserve - foreign)
    research_gpus: int  # GPUs lent to research slots
    fail_closed: str | None = None  # reason research got 0, if it did
    forecast_withheld_gpus: int = 0  # headroom not lent: the forecast needs it back too soon
    free_by_node: tuple[int, ...] | None = None  # Capacity.free_by_node (None: not watched)
    # GPUs of the reserve its window no longer asks, kept while the smooth rate of these
    # services rises (core.reserve).
    reserve_held_gpus: int = 0
    reserve_held_for: tuple[str, ...] = ()


def replica_room(free_by_node: tuple[int, ...], gpus_per_replica: int) -> int:
    """Replicas of `gpus_per_replica` GPUs that bind now without preempting: each needs its
    GPUs on one node. Below free GPUs // gpus_per_replica, the free GPUs are fragmented
    (kube-scheduler spreading pods: docs/install.md "Pack GPUs")."""
    if gpus_per_replica <= 0:
        raise ValueError(f"gpus_per_replica must be > 0, got {gpus_per_replica}")
    return sum(f // gpus_per_replica for f in free_by_node if f > 0)


@dataclass(frozen=True, slots=True)
class Decision:
    seq: int  # increments every cycle; 0 = no cycle completed yet
    wall_time: float  # time.time() of the cycle, for humans
    services: Mapping[str, ServiceDecision] = field(default_factory=dict)
    research: Mapping[str, ResearchDecision] = field(default_factory=dict)
    pool: PoolSplit | None = None
    config_generation: int = 0
    config: Config | None = None  # the config this decision was made under (names, targets)
    complete: bool = False  # every service had fresh data (research may be lent GPUs)
    # Monotonic clock time of the cycle; readers refuse to serve a decision older than
    # scrape.staleAfterSeconds as current. None: age unknown (hand-made snapshots).
    made_at: float | None = None
    give_back: Planned | None = None  # research give-back the forecast and reserve plan for

    def __post_init__(self) -> None:
        # Read-only views: a published snapshot can never be changed under a reader.
        object.__setattr__(self, "services", MappingProxyType(dict(self.services)))
        object.__setattr__(self, "research", MappingProxyType(dict(self.research)))

    @staticmethod
    def initial() -> Decision:
        return Decision(seq=0, wall_time=0.0)
