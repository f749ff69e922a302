"""One control cycle as a pure step: the only path from load to a Decision.

    step(CycleInput, CycleState) -> (Decision, CycleState)

research give-back (from the pods being deleted) -> aggregate each service's TargetStates
-> forecast -> policy.decide -> reserve -> accounting.split_pool (with the forecast's
research limits).
The server's control loop (`scaler.loop`), the simulator's `ours` policy (`scaler.sim`) and
the demo all call this function, so the bench measures exactly what the server runs.
Scraping, discovery, capacity reading and clocks stay outside: the caller passes their
results in. `prev` is never changed; the returned state replaces it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from scaler.config import Config, Forecast, InferenceService, forecast_for
from scaler.core import forecast, giveback, ramp
from scaler.core.accounting import Capacity, inference_gpus, split_pool
from scaler.core.aggregate import aggregate
from scaler.core.decision import Decision, QueueRead, ServiceDecision, SignalVerdict
from scaler.core.forecast import History
from scaler.core.giveback import GiveBack
from scaler.core.load import TargetState
from scaler.core.policy import PolicyState, decide
from scaler.core.reserve import ReserveTracker
from scaler.core.reserve import lead as reserve_lead


@dataclass(frozen=True, slots=True)
class CycleInput:
    config: Config
    # Per inference service: its targets this cycle; None = discovery does not know them.
    targets: Mapping[str, Sequence[TargetState] | None]
    capacity: Capacity | None  # None: unknown (research fails closed)
    now: float  # monotonic seconds: windows, staleness, reserve history
    wall_time: float = 0.0  # for humans (Decision.wall_time)
    generation: int = 0  # config generation the decision is made under
    # Wall-clock Unix seconds for the forecast's time of day / day of week (the server: its
    # clock; the bench: simulated). None: the forecast is unavailable (reactive only).
    calendar: float | None = None
    # Per research class with a `queue`: this cycle's read of it (absent: not read; the
    # class gets 0 slots).
    queued: Mapping[str, QueueRead] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CycleState:
    """Memory between cycles. Start from `CycleState()`; pass back what `step` returned."""

    seq: int = 0
    policy: Mapping[str, PolicyState] = field(default_factory=dict)
    reserve: ReserveTracker | None = None  # demand history for the adaptive reserve
    # Research waits for one complete cycle: until every service's load has been seen once,
    # lending could take GPUs inference needs.
    had_complete_cycle: bool = False
    # pool.forecast: needed replicas by day and time slot, per service.
    forecast: Mapping[str, History] = field(default_factory=dict)
    # Research pods being deleted and how long recent ones took to leave (core.giveback).
    give_back: GiveBack = field(default_factory=GiveBack)


def step(inp: CycleInput, prev: CycleState) -> tuple[Decision, CycleState]:
    cfg, now = inp.config, inp.now
    fc = cfg.pool.forecast
    services: dict[str, ServiceDecision] = {}
    policy: dict[str, PolicyState] = {}
    history: dict[str, History] = {}
    deleting = None if inp.capacity is None else inp.capacity.research_deleting
    give_back = giveback.observe(prev.give_back, deleting, inp.wall_time, cfg.pool.giveBack.samples)
    plan = giveback.planned(give_back, cfg.pool)
    # The pool's forecast settings in each service's calendar, once per cycle (prediction,
    # recording and research withholding all read them).
    settings = {svc.name: forecast_for(fc, svc) for svc in cfg.inference}
    smooth: set[str] = set()  # services whose rate counts as smooth this cycle (`calm`)
    for svc in cfg.inference:
        load = aggregate(svc.name, inp.targets.get(svc.name), now, cfg.scrape.staleAfterSeconds)
        hist = prev.forecast.get(svc.name)
        ahead = None
        note = ""
        cal = inp.calendar if fc.enabled and svc.forecast else None  # None: reactive only
        sfc = settings[svc.name]
        if fc.enabled and not svc.forecast:
            note = "off for this service (forecast: false): reactive only"
        lead = svc.coldStartSeconds + plan.seconds  # until a replica asked now is Ready
        ramp_aside = False
        swing = _swing(prev.policy.get(svc.name))
        # (with or without the forecast: the swing is measured for services with `slo:`)
        calm = _smooth_rate(swing, fc)  # why the rate counts as smooth (None: it swings)
        if calm is not None:
            smooth.add(svc.name)
        if cal is not None:
            p = forecast.predict(hist, sfc, cal, lead)
            ahead, note = _forecast_verdict(p, prev.policy.get(svc.name), fc)
            if ahead is not None and calm is not None:
                ahead, note = None, f"{note}; not used: {calm}"
            if p.replicas is not None and calm is None and swing is not None:
                # The bursts of a rate that swings read as rises: the ramp signal's
                # projections of them preempted research (coding week, --seed 2: 3.6 % of
                # the harvest lost, 2.4 % with it aside); the forecast sees its real ramps.
                ramp_aside = True
                note = (
                    f"{note}; the ramp signal stands aside: the forecast covers a rate "
                    f"that swings ({swing:.2f})"
                )
        d, policy[svc.name] = decide(
            svc,
            load,
            prev.policy.get(svc.name),
            now,
            forecast=ahead,
            lead_s=lead,
            ramp_aside=ramp_aside,
            smooth_rate=calm is not None,
        )
        services[svc.name] = replace(d, forecast_note=note) if note else d
        if cal is not None:  # (a service that opts out keeps no history: back on, it restarts)
            need = _reactive_need(svc, d)
            history[svc.name] = (
                forecast.record(hist, sfc, cal, need)
                if need is not None
                else (hist or forecast.empty(sfc))
            )
        elif fc.enabled and svc.forecast and hist is not None:  # no clock now: keep the history
            history[svc.name] = hist
    complete = all(d.fresh for d in services.values())

    reserve = ReserveTracker(cfg.pool) if prev.reserve is None else prev.reserve.copy()
    reserve.reconfigure(cfg.pool)
    reserve.observe(now, inference_gpus(cfg, services), _needed_gpus(cfg, services))
    ready = prev.had_complete_cycle or complete
    rising = _smooth_and_rising(cfg, smooth, policy, now, plan.seconds)
    keep = reserve.reserve(now, reserve_lead(cfg.pool, plan.seconds), rising=bool(rising))
    pool, research = split_pool(
        cfg,
        services,
        inp.capacity,
        keep.gpus,
        ready_for_research=ready,
        withhold=_withhold(cfg, services, history, settings, inp.calendar),
        queued=inp.queued,
    )
    if keep.held:
        pool = replace(pool, reserve_held_gpus=keep.held, reserve_held_for=tuple(rising))
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
        give_back=plan,
    )
    state = CycleState(
        seq, MappingProxyType(policy), reserve, ready, MappingProxyType(history), give_back
    )
    return decision, state


def _forecast_verdict(
    p: forecast.Prediction, pol: PolicyState | None, fc: Forecast
) -> tuple[SignalVerdict | None, str]:
    """The forecast signal for this cycle and explain's note. A prediction within
    `minAboveLoadFraction` of what the load asked may not raise; it still holds what it
    raised (never more): as a predicted burst arrives the load's ask rises toward it, and
    dropping it then stepped the target down mid-burst (ServeGen seed 7: 99.62 % vs 99.90 %)."""
    if p.replicas is None:
        return None, p.note
    asked = _load_asked(pol)
    if p.replicas >= _above(asked, fc.minAboveLoadFraction):
        return SignalVerdict(
            "forecast", p.replicas, p.replicas, p.replicas, note=f"{p.note} ahead"
        ), p.note
    hold = min(pol.desired, p.replicas) if pol is not None and pol.desired is not None else 0
    if hold > asked:
        note = f"{p.note}: holds {hold} (within the load's own range to raise)"
        return SignalVerdict("forecast", hold, hold, hold, note=note), note
    pct = f"{fc.minAboveLoadFraction:.0%}"
    return None, f"{p.note}: {p.replicas} is within the load's own {pct} of {asked} (not used)"


def _swing(pol: PolicyState | None) -> float | None:
    return pol.rate_swing.typical if pol is not None and pol.rate_swing is not None else None


def _smooth_rate(swing: float | None, fc: Forecast) -> str | None:
    """Why the forecast does not raise for a service whose rate swings `swing` (smooth
    enough for the reactive signals to follow), or None (bursty, or not known yet)."""
    if swing is None or swing >= fc.minRateSwing:
        return None
    return (
        f"the request rate is smooth (typical swing {swing:.3f} < minRateSwing "
        f"{fc.minRateSwing:g}): the reactive signals follow it"
    )


def _smooth_and_rising(
    cfg: Config,
    smooth: Collection[str],
    policy: Mapping[str, PolicyState],
    now: float,
    give_back_s: float,
) -> list[str]:
    """The services whose request rate is smooth (`smooth`: the reading that sets the
    forecast aside this cycle, so the two never disagree) and rising now (its 5-minute
    average above its 20-minute one, core.ramp): while there is one, the adaptive reserve
    does not fall (core.reserve). Averages without a measured rate for `ramp.GAP_S` (too
    few requests, no data) say nothing: a quiet night must not hold the reserve on the last
    rise it saw.

    Only where research takes longer to give GPUs back (`give_back_s`, core.giveback) than
    the service's replica takes to load its model: the hold is there so that a ramp's
    replicas do not wait out the grace period; research that leaves sooner than a cold
    start barely delays them, and the hold only cost harvest and lost work there (bench,
    research checkpointing or exiting on SIGTERM: ServeGen seed 1 97.1 -> 94.2 %)."""
    out = []
    for svc in cfg.inference:
        if give_back_s <= svc.coldStartSeconds:
            continue
        p = policy.get(svc.name)
        if svc.name not in smooth or p is None or p.trend is None:
            continue
        t = p.trend
        if now - t.at <= ramp.GAP_S and t.long > 0 and t.short > t.long:
            out.append(svc.name)
    return out


def _above(replicas: int, fraction: float) -> int:
    """The least a forecast must ask to count: `fraction` more than `replicas`, and one."""
    return replicas + max(1, math.ceil(fraction * replicas - 1e-9))


def _load_asked(p: PolicyState | None) -> int:
    """The most the load's signals asked over the scale-down window (the forecast's ask is
    not kept there): the level the reactive policy holds anyway."""
    return max((r for _, r in p.window), default=0) if p is not None else 0


def _reactive_need(svc: InferenceService, d: ServiceDecision) -> int | None:
    """What the signals alone asked (the forecast's own ask left out, so it never feeds
    itself), clamped; None without fresh evidence (nothing is recorded then)."""
    if not d.fresh:
        return None
    asks = [
        v.replicas if v.need is None else v.need
        for v in d.signals
        if not v.abstain and v.signal != "forecast"
    ]
    if not asks:
        return None
    return max(svc.minReplicas, min(svc.maxReplicas, max(asks)))


def _needed_gpus(cfg: Config, services: Mapping[str, ServiceDecision]) -> int:
    """GPUs the load needed this cycle (each service's `_reactive_need`; a service without
    fresh evidence counts what it holds): the adaptive reserve's rises are measured on
    this against what inference held (see `core.reserve`)."""
    total = 0
    for svc in cfg.inference:
        d = services.get(svc.name)
        if d is None:
            continue
        need = _reactive_need(svc, d)
        total += max(0, d.held if need is None else need) * svc.gpusPerReplica
    return total


def _withhold(
    cfg: Config,
    services: Mapping[str, ServiceDecision],
    history: Mapping[str, History],
    settings: Mapping[str, Forecast],
    calendar: float | None,
) -> dict[str, int]:
    """Per research class: GPUs inference is predicted to need, beyond what it holds or asks
    now, within the class's checkpoint interval, or needed within the last such interval
    (bursts come back); `pool.forecast` on and the class's checkpointIntervalSeconds > 0.
    Only a want `minAboveLoadFraction` above what inference holds counts (see step)."""
    fc = cfg.pool.forecast
    out: dict[str, int] = {}
    if not fc.enabled or calendar is None:
        return out
    for c in cfg.research:
        if c.checkpointIntervalSeconds <= 0:
            continue
        extra = 0
        for svc in cfg.inference:
            d = services.get(svc.name)
            if d is None:
                continue
            h = history.get(svc.name)
            span = c.checkpointIntervalSeconds
            # What the history predicts over the interval, and what inference needed over
            # the last one (the persistence forecast: it also covers the reactive fallback).
            wants = [forecast.predict(h, settings[svc.name], calendar, span).replicas]
            wants.append(forecast.recent_peak(h, calendar, span))
            known = [x for x in wants if x is not None]
            if not known:
                continue
            want = min(svc.maxReplicas, max(known))
            if want < _above(d.held, fc.minAboveLoadFraction):
                continue  # the load's own noise: withholding for it starved research (conv)
            extra += (want - d.held) * svc.gpusPerReplica
        out[c.name] = extra
    return out
