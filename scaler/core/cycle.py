"""One control cycle as a pure step: the only path from load to a Decision.

    step(CycleInput, CycleState) -> (Decision, CycleState)

aggregate each service's TargetStates -> policy.decide -> reserve -> accounting.split_pool.
The server's control loop (`scaler.loop`), the simulator's `ours` policy (`scaler.sim`) and
the demo all call this function, so the bench measures exactly what the server runs.
Scraping, discovery, capacity reading and clocks stay outside: the caller passes their
results in. `prev` is never changed; the returned state replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scaler.config import Config
from scaler.core.accounting import Capacity, inference_gpus, split_pool
from scaler.core.aggregate import aggregate
from scaler.core.decision import Decision, ServiceDecision
from scaler.core.load import TargetState
from scaler.core.policy import PolicyState, decide
from scaler.core.reserve import ReserveTracker


@dataclass(frozen=True, slots=True)
class CycleInput:
    config: Config
    # Per inference service: its targets this cycle; None = discovery does not know them.
    targets: Mapping[str, Sequence[TargetState] | None]
    capacity: Capacity | None  # None: unknown (research fails closed)
    now: float  # monotonic seconds: windows, staleness, reserve history
    wall_time: float = 0.0  # for humans (Decision.wall_time)
    generation: int = 0  # config generation the decision is made under


@dataclass(frozen=True, slots=True)
class CycleState:
    """Memory between cycles. Start from `CycleState()`; pass back what `step` returned."""

    seq: int = 0
    policy: Mapping[str, PolicyState] = field(default_factory=dict)
    reserve: ReserveTracker | None = None  # demand history for the adaptive reserve
    # Research waits for one complete cycle: until every service's load has been seen once,
    # lending could take GPUs inference needs.
    had_complete_cycle: bool = False


def step(inp: CycleInput, prev: CycleState) -> tuple[Decision, CycleState]:
    cfg, now = inp.config, inp.now
    services: dict[str, ServiceDecision] = {}
    policy: dict[str, PolicyState] = {}
    for svc in cfg.inference:
        load = aggregate(svc.name, inp.targets.get(svc.name), now, cfg.scrape.staleAfterSeconds)
        services[svc.name], policy[svc.name] = decide(svc, load, prev.policy.get(svc.name), now)
    complete = all(d.fresh for d in services.values())

    reserve = ReserveTracker(cfg.pool) if prev.reserve is None else prev.reserve.copy()
    reserve.reconfigure(cfg.pool)
    reserve.observe(now, inference_gpus(cfg, services))
    ready = prev.had_complete_cycle or complete
    pool, research = split_pool(
        cfg, services, inp.capacity, reserve.reserve(now), ready_for_research=ready
    )
    seq = prev.seq + 1
    decision = Decision(
        seq=seq,
        wall_time=inp.wall_time,
        services=services,
        research=research,
        pool=pool,
        config_generation=inp.generation,
        config=cfg,
        complete=complete,
        made_at=now,
    )
    return decision, CycleState(seq, MappingProxyType(policy), reserve, ready)
