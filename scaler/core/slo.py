"""The SLO signal: measured attainment of a latency objective, and the replicas that meet it.

Per cycle the service's TTFT histogram delta (summed over fresh replicas, see
`core.aggregate`) becomes one `SloEntry`: requests with a first token within the objective
(linear interpolation inside the bucket that holds the objective, as Prometheus'
`histogram_quantile` does: requests are assumed spread evenly within a bucket), all
requests, the request rate and the ready replicas. The policy keeps the entries of the last
`slo.windowSeconds` in its state.

* attainment = Σ within / Σ all over the window (None below `slo.min_requests`: too few
  requests to tell from noise, the slo signal then asks nothing and the others decide);
* capacity: requests/s one ready replica serves at the objective, learned AIMD-style.
  A breach (attainment below the objective on requests served after the last raise had
  time to take effect) lowers it to 90 % of the per-replica rate served meanwhile, at most
  once per window; a full window that holds comfortably (failures at most half of those
  allowed) at >= 80 % of it raises it by 2 % per window, up to 95 % of the per-replica
  rate of the last breach (for 6 h after it), and a window that holds at a higher
  per-replica rate raises it to that rate. Unknown until the first breach: before that the
  existing signals alone size the service;
* the slo signal asks ceil(request rate over the window / capacity); on a breach at least
  one replica more than exist, unless replicas are already starting: then it holds what
  exists. Requests served before the last raise could take effect (raise +
  `coldStartSeconds`) do not count as a breach, so one slow window is answered once; while
  the window still holds such a breach, it asks at least the replicas that exist (no
  scale-down straight after a breach).

Pure: time comes in as `now`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scaler.config import InferenceService, Slo
from scaler.core import histogram
from scaler.core.decision import SignalVerdict, SloStatus
from scaler.core.load import ServiceLoad

DECREASE = 0.10  # a breach sets capacity to (1 - DECREASE) x the per-replica rate served
INCREASE = 0.02  # per comfortable window at >= PROBE_FROM x capacity
PROBE_FROM = 0.8
# Probing stays below (1 - DECREASE / 2) x the per-replica rate of the last breach for this
# long: under steady traffic the capacity settles instead of probing into the same breach
# again and again (a sawtooth would flap the replicas).
CEILING_S = 6 * 3600.0

_EPS = 1e-9
_MAX_ASK = 1e6  # replicas; the policy clamps to maxReplicas anyway


@dataclass(frozen=True, slots=True)
class SloEntry:
    """One cycle's measurement (compact: the histogram is reduced at the objective)."""

    t: float  # `now` of the cycle
    good: float  # requests with TTFT <= objective (interpolated)
    total: float  # requests with a first token in this cycle
    rps: float | None  # first tokens per second (all fresh replicas)
    ready: int
    itl_good: float = 0.0  # token intervals within slo.itlSeconds
    itl_total: float = 0.0


@dataclass(frozen=True, slots=True)
class Learned:
    """What the slo signal learned about the service (PolicyState keeps it)."""

    capacity_rps: float | None = None  # requests/s per ready replica at the objective
    changed_at: float | None = None  # when capacity last changed (one change per window)
    breach_rps: float | None = None  # per-replica rate of the last breach: the probe ceiling
    breach_at: float | None = None


@dataclass(frozen=True, slots=True)
class Measure:
    attainment: float | None
    requests: float
    rps: float | None
    per_replica: float | None
    itl_attainment: float | None


def observe(
    slo: Slo, load: ServiceLoad, window: tuple[SloEntry, ...], now: float
) -> tuple[SloEntry, ...]:
    """The window with this cycle's measurement appended (if any) and old entries dropped."""
    kept = tuple(e for e in window if now - slo.windowSeconds < e.t <= now)
    if load.ttft is None:
        return kept
    rps = load.requests_per_s
    if rps is not None and not (math.isfinite(rps) and rps >= 0):
        rps = None
    itl_good = itl_total = 0.0
    if slo.itlSeconds is not None and load.itl is not None:
        itl_good, itl_total = histogram.within(load.itl, slo.itlSeconds), histogram.total(load.itl)
    entry = SloEntry(
        now,
        histogram.within(load.ttft, slo.ttftSeconds),
        histogram.total(load.ttft),
        rps,
        load.ready,
        itl_good,
        itl_total,
    )
    return (*kept, entry)


def measure(window: tuple[SloEntry, ...], min_requests: int, since: float = -math.inf) -> Measure:
    es = [e for e in window if e.t >= since]
    total = sum(e.total for e in es)
    rates = [e.rps for e in es if e.rps is not None]
    per = [e.rps / e.ready for e in es if e.rps is not None and e.ready > 0]
    itl_total = sum(e.itl_total for e in es)
    return Measure(
        attainment=sum(e.good for e in es) / total if total >= max(1, min_requests) else None,
        requests=total,
        rps=sum(rates) / len(rates) if rates else None,
        per_replica=sum(per) / len(per) if per else None,
        itl_attainment=sum(e.itl_good for e in es) / itl_total if itl_total > 0 else None,
    )


def breached(slo: Slo, m: Measure) -> bool:
    if m.attainment is not None and m.attainment < slo.attainment - _EPS:
        return True
    return m.itl_attainment is not None and m.itl_attainment < slo.attainment - _EPS


def _settled_since(svc: InferenceService, raised_at: float | None) -> float:
    """Requests served before the last raise could take effect say nothing about it."""
    return -math.inf if raised_at is None else raised_at + svc.coldStartSeconds


def verdict(
    svc: InferenceService,
    load: ServiceLoad,
    window: tuple[SloEntry, ...],
    capacity: float | None,
    raised_at: float | None,
    now: float,
) -> tuple[SignalVerdict, SloStatus]:
    slo = svc.slo
    assert slo is not None
    need = slo.min_requests
    m = measure(window, need)
    status = SloStatus(
        ttft_s=slo.ttftSeconds,
        objective=slo.attainment,
        window_s=slo.windowSeconds,
        attainment=m.attainment,
        requests=m.requests,
        capacity_rps=capacity,
        requests_per_s=m.rps,
        itl_s=slo.itlSeconds,
        itl_attainment=m.itl_attainment,
        bucket=None if load.ttft is None else histogram.bracket(load.ttft, slo.ttftSeconds),
    )
    value = m.attainment if m.attainment is not None else 1.0
    if m.attainment is None:
        note = f"{m.requests:.0f} requests in {slo.windowSeconds:.0f} s < {need}: not measured"
        return SignalVerdict("slo", value, slo.attainment, 0, note=note), status
    base = 0
    if capacity is not None and capacity > 0 and m.rps is not None:
        base = max(0, math.ceil(min(m.rps / capacity, _MAX_ASK) - _EPS))
    recent = measure(window, need, _settled_since(svc, raised_at))
    on_the_way = load.ready + load.starting
    note = f"TTFT <= {slo.ttftSeconds:g} s for {m.attainment:.2%} of {m.requests:.0f}"
    if capacity is not None:
        note += f"; capacity {capacity:.3g} req/s/replica"
    if breached(slo, recent):  # (measured after the last raise took effect)
        coming = load.starting > 0
        ask = max(base, on_the_way if coming else on_the_way + 1)
        note += "; below objective" + (": replicas on the way" if coming else "")
    elif breached(slo, m):  # met since the last raise; the window still holds the breach
        ask = max(base, on_the_way)
        note += "; below objective before the last raise: holding"
    else:
        ask = base
    return SignalVerdict("slo", value, slo.attainment, ask, note=note), status


def learn(
    svc: InferenceService,
    load: ServiceLoad,
    window: tuple[SloEntry, ...],
    prev: Learned,
    raised_at: float | None,
    now: float,
) -> Learned:
    """What is known for the next cycle (see the module docstring)."""
    slo = svc.slo
    assert slo is not None
    need = slo.min_requests
    cap = prev.capacity_rps
    recent = measure(window, need, _settled_since(svc, raised_at))
    quiet = prev.changed_at is None or now - prev.changed_at >= slo.windowSeconds
    if breached(slo, recent):
        if load.starting == 0 and quiet and recent.per_replica:  # (a rate > 0)
            lowered = recent.per_replica * (1 - DECREASE)
            cap = lowered if cap is None else min(cap, lowered)
            return Learned(cap, now, recent.per_replica, now)
        return prev
    m = measure(window, need)
    if cap is None or m.attainment is None or m.per_replica is None or breached(slo, m):
        return prev
    if m.per_replica > cap and (prev.breach_rps is None or m.per_replica >= prev.breach_rps):
        # held at a higher rate per replica than the last breach: that breach is history
        return Learned(m.per_replica, now)
    if m.per_replica > cap:  # held above the capacity, below the last breach: proven
        return replace(prev, capacity_rps=m.per_replica, changed_at=now)
    allowed = 1.0 - slo.attainment
    comfortable = 1.0 - m.attainment <= allowed / 2 and (
        m.itl_attainment is None or 1.0 - m.itl_attainment <= allowed / 2
    )
    full = bool(window) and now - window[0].t >= slo.windowSeconds * 0.9
    ceiling = math.inf
    recent_breach = prev.breach_at is not None and now - prev.breach_at < CEILING_S
    if prev.breach_rps is not None and recent_breach:
        ceiling = prev.breach_rps * (1 - DECREASE / 2)
    probe = min(cap * (1 + INCREASE), ceiling)
    if comfortable and full and quiet and m.per_replica >= PROBE_FROM * cap and probe > cap:
        return replace(prev, capacity_rps=probe, changed_at=now)
    return prev
