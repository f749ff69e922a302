"""The ramp signal: replicas for the request rate a steep rise will reach by the time new
replicas can serve.

The forecast raises ahead of the ramps its history has seen. A ramp it has not seen (the
first day, a day busier or earlier than the history, a launch) is answered only once the
replicas fall behind, and a replica asked then is Ready a lead later: `coldStartSeconds`
plus the research give-back (720 s with the chart's defaults). On the bench's ServeGen
seed 3 the rate doubled in 25 minutes with one day of history; the slo signal raised one
replica per breach, the first arrived 20 minutes late, and 17 % of that hour's requests
missed the objective (docs/bench.md).

Two moving averages of the service's request rate (first tokens/s), time constants
`SHORT_S` and `LONG_S`. On a rate growing exponentially at g per second each lags the rate
by its time constant, so g = ln(short / long) / (LONG_S - SHORT_S), and the rate one lead
from now is short x exp(g x (SHORT_S + lead)). While the rate doubles faster than
`slo.rampDoublingSeconds`, the signal asks what that rate needs at the slo signal's learned
capacity, at most `MAX_FACTOR` times what the short average needs. Averaging over minutes
keeps a burst of seconds from reading as a ramp; on the bursty coding week the signal is
roughly neutral, within that week's run-to-run noise (docs/bench.md).

The same averages measure how much the rate swings (`RateSwing`): the time-weighted
average of |ln(short / long)| over `SWING_S` (a day), known once `WARM_S` of rates is in. A
bursty service's rate swings ~10x more than a smooth one's (coding week: 0.16-0.86,
median 0.37; ServeGen: 0.02-0.09, median 0.04; conversation week 0.025-0.05);
`core.cycle` lets the forecast raise ahead only for a rate that swings
(`pool.forecast.minRateSwing`), and sets this signal aside where the forecast predicts
for such a rate: its bursts read as rises here, and the forecast sees its real ramps.
Unlike the averages, the swing is persisted.

What it asks is a projection, not a need: the forecast's history and the adaptive reserve
never record it (`need` 0), and the stabilization window holds it like any other ask. It
never abstains (no projection = no verdict), so it cannot block a scale-down, and without
a rate or a learned capacity it asks nothing. The policy feeds it only the rates of
cycles whose attainment was measured (`slo.minRequests` in the window). Its averages are
not persisted: after a restart (or a gap of more than `GAP_S` without a measured rate)
they start afresh, level, and the signal is silent until a rise shows again.

Pure: time comes in as `now`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scaler.core.decision import SignalVerdict
from scaler.core.ewma import ewma

SHORT_S = 300.0  # the recent rate: long enough that a burst of seconds moves it little
LONG_S = 1200.0  # the rate the rise is measured from
MAX_FACTOR = 2.0  # the projection asks at most twice what the recent rate needs
GAP_S = 120.0  # no rate for longer: both averages start afresh at the next one
# The typical swing |ln(short / long)|: a day-long average, so that a smooth service's
# largest ramp weighs in little (ServeGen's most: 0.09 over a day, 0.13 over 6 h).
SWING_S = 86400.0
WARM_S = 3600.0  # the typical swing is known once rates have been folded in this long

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class RateTrend:
    """Moving averages of a service's request rate (requests/s)."""

    at: float  # `now` of the last rate folded in
    short: float
    long: float

    @property
    def growth(self) -> float | None:
        """Per second (ln of the rate's growth factor); None when a rate is 0."""
        if self.short <= 0 or self.long <= 0:
            return None
        return math.log(self.short / self.long) / (LONG_S - SHORT_S)


def observe(prev: RateTrend | None, rps: float | None, now: float) -> RateTrend | None:
    """`prev` with this cycle's request rate folded in (weighted by the time since the last
    one, so the averages do not depend on the cycle length). No usable rate this cycle:
    `prev` unchanged (a missing reading is not a zero)."""
    if rps is None or not math.isfinite(rps) or rps < 0:
        return prev
    if prev is None or now <= prev.at or now - prev.at > GAP_S:
        return RateTrend(now, rps, rps)
    dt = now - prev.at
    return RateTrend(now, ewma(prev.short, rps, dt, SHORT_S), ewma(prev.long, rps, dt, LONG_S))


@dataclass(frozen=True, slots=True)
class RateSwing:
    """How much a service's request rate swings: a time-weighted average of |ln(short /
    long)| (`total`) and the weight it has gathered, 1 - e^(-age / SWING_S), so that
    total / weight is the average since `since` however young."""

    since: float  # `now` of the first rate folded in
    at: float  # `now` of the last one
    total: float = 0.0
    weight: float = 0.0

    @property
    def typical(self) -> float | None:
        """The typical swing, once WARM_S of rates is in; else None."""
        if self.at - self.since < WARM_S or self.weight <= 0:
            return None
        return self.total / self.weight


def swing(prev: RateSwing | None, trend: RateTrend | None, now: float) -> RateSwing | None:
    """`prev` with the trend's |ln(short / long)| at `now` folded in (weighted by the time
    since the last, like the averages). No trend or a zero rate: `prev` unchanged; a clock
    going back starts afresh."""
    if trend is None or trend.short <= 0 or trend.long <= 0:
        return prev
    if prev is None or now < prev.at:
        return RateSwing(now, now)
    dt = now - prev.at
    x = abs(math.log(trend.short / trend.long))
    return RateSwing(
        prev.since, now, ewma(prev.total, x, dt, SWING_S), ewma(prev.weight, 1.0, dt, SWING_S)
    )


def verdict(
    trend: RateTrend | None, capacity_rps: float | None, lead_s: float, doubling_s: float
) -> SignalVerdict | None:
    """The ramp signal's ask, or None: off (`doubling_s` 0), no rate or capacity yet, or
    the rate not rising faster than doubling in `doubling_s`."""
    if doubling_s <= 0 or trend is None or capacity_rps is None or capacity_rps <= 0:
        return None
    g = trend.growth
    if g is None or g <= math.log(2.0) / doubling_s:
        return None
    ahead = min(MAX_FACTOR * trend.short, trend.short * math.exp(g * (SHORT_S + lead_s)))
    replicas = max(0, math.ceil(ahead / capacity_rps - _EPS))
    minutes = math.log(2.0) / g / 60.0
    note = (
        f"request rate {trend.short:.3g}/s doubling in {minutes:.0f} min: "
        f"{ahead:.3g}/s in {lead_s:.0f} s at {capacity_rps:.3g} req/s/replica"
    )
    return SignalVerdict("ramp", minutes, doubling_s / 60.0, replicas, note=note, need=0)
