"""Pure: a service's TargetStates -> one ServiceLoad."""

from __future__ import annotations

from collections.abc import Sequence

from scaler.core import histogram
from scaler.core.load import ServiceLoad, TargetPhase, TargetState


def _total_rate(rates: Sequence[float], fresh: int) -> float | None:
    """Service throughput from the targets that have a rate.

    A target has no rate on its first scrape (new replica) or right after a counter reset.
    Counting it as 0 would invent a zero; waiting for it would stall the throughput signal
    (and with it research lending) after every scale-up. It is assumed to carry the mean of
    the others until its second scrape. No rate at all: None (the signal abstains).
    """
    if not rates:
        return None
    return sum(rates) / len(rates) * fresh


def _requests_per_s(states: Sequence[TargetState], fresh: int) -> float | None:
    """First tokens per second from the TTFT histogram's count deltas, the same way as
    tokens/s: a fresh target without a delta this cycle carries the mean of the others."""
    rates = [
        histogram.total(s.ttft_delta) / s.delta_s
        for s in states
        if s.ttft_delta is not None and s.delta_s
    ]
    return _total_rate(rates, fresh)


def aggregate(
    name: str, states: Sequence[TargetState] | None, now: float, stale_after_s: float
) -> ServiceLoad:
    """Sum counts, average/max ratios over serving targets whose data is fresh.

    `states` None means discovery does not know the targets: no data at all.
    Zero targets discovered is real data (the service is scaled to zero).
    """
    if states is None:
        return ServiceLoad(name, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, None, False, "targets unknown")
    fresh = [
        s
        for s in states
        if s.phase is TargetPhase.SERVING and s.sample is not None and s.fresh(now, stale_after_s)
    ]
    serving = sum(1 for s in states if s.phase is TargetPhase.SERVING)
    starting = len(states) - serving
    unhealthy = serving - len(fresh)
    reasons = [
        f"{s.address}: {s.error or 'stale'}"
        for s in states
        if s.phase is TargetPhase.SERVING and s not in fresh
    ]
    samples = [s.sample for s in fresh if s.sample is not None]
    kv = [x.kv_usage_mean for x in samples]
    rates = [s.tokens_per_s for s in fresh if s.tokens_per_s is not None]
    ttft = histogram.add(s.ttft_delta for s in fresh if s.ttft_delta is not None)
    itl = histogram.add(s.itl_delta for s in fresh if s.itl_delta is not None)
    return ServiceLoad(
        name=name,
        ready=len(fresh),
        starting=starting,
        unhealthy=unhealthy,
        waiting=sum(x.waiting for x in samples),
        running=sum(x.running for x in samples),
        kv_usage_mean=sum(kv) / len(kv) if kv else 0.0,
        kv_usage_max=max((x.kv_usage_max for x in samples), default=0.0),
        tokens_per_s=_total_rate(rates, len(fresh)),
        complete=unhealthy == 0,
        reason="; ".join(reasons[:5])
        + (f" (+{len(reasons) - 5} more)" if len(reasons) > 5 else ""),
        ttft=ttft,
        itl=itl,
        requests_per_s=_requests_per_s(fresh, len(fresh)),
    )
