"""The ramp signal (`core.ramp`): moving averages of the request rate, the growth they
read, and the replicas asked for the rate one lead ahead; then through `decide` and
`cycle.step` (never recorded as a need, off with `rampDoublingSeconds: 0`). Times injected."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest

from scaler.core import ramp
from scaler.core.cycle import _reactive_need
from scaler.core.decision import ServiceDecision
from scaler.core.policy import PolicyState, decide, format_decision
from scaler.core.ramp import (
    GAP_S,
    LONG_S,
    MAX_FACTOR,
    SHORT_S,
    SWING_S,
    WARM_S,
    RateSwing,
    RateTrend,
)
from scaler.core.slo import Learned, SloEntry
from tests.test_slo import hist, make_load, make_svc

LEAD = 720.0  # cold start 120 s + the chart's 600-s research grace
MET = hist(100, 100, 100, 100, 100)  # 100 first tokens per cycle, all within 2 s

# (previous, rate this cycle, now, expected): the averages move by the time since the last.
OBSERVE = {
    "first-rate-seeds-both": (None, 10.0, 5.0, RateTrend(5.0, 10.0, 10.0)),
    "no-rate-keeps-the-averages": (RateTrend(0.0, 10.0, 8.0), None, 5.0, RateTrend(0.0, 10.0, 8.0)),
    "nan-is-no-rate": (RateTrend(0.0, 10.0, 8.0), math.nan, 5.0, RateTrend(0.0, 10.0, 8.0)),
    "negative-is-no-rate": (RateTrend(0.0, 10.0, 8.0), -1.0, 5.0, RateTrend(0.0, 10.0, 8.0)),
    "inf-is-no-rate": (RateTrend(0.0, 10.0, 8.0), math.inf, 5.0, RateTrend(0.0, 10.0, 8.0)),
    "zero-is-a-rate": (  # an idle service's rate falls; it is not a missing reading
        RateTrend(0.0, 10.0, 10.0),
        0.0,
        60.0,
        RateTrend(60.0, 10.0 * math.exp(-60.0 / SHORT_S), 10.0 * math.exp(-60.0 / LONG_S)),
    ),
    "no-rate-and-no-history-is-nothing": (None, None, 5.0, None),
    "a-gap-of-exactly-GAP_S-still-folds": (
        RateTrend(0.0, 10.0, 10.0),
        20.0,
        GAP_S,
        RateTrend(
            GAP_S,
            10.0 + 10.0 * (1 - math.exp(-GAP_S / SHORT_S)),
            10.0 + 10.0 * (1 - math.exp(-GAP_S / LONG_S)),
        ),
    ),
    "a-gap-starts-afresh": (
        RateTrend(0.0, 10.0, 8.0),
        30.0,
        GAP_S + 1,
        RateTrend(GAP_S + 1, 30.0, 30.0),
    ),
    "time-going-back-starts-afresh": (
        RateTrend(9.0, 10.0, 8.0),
        30.0,
        5.0,
        RateTrend(5.0, 30.0, 30.0),
    ),
    "weighted-by-the-time-since": (
        RateTrend(0.0, 10.0, 10.0),
        20.0,
        60.0,
        RateTrend(
            60.0,
            10.0 + 10.0 * (1 - math.exp(-60.0 / SHORT_S)),
            10.0 + 10.0 * (1 - math.exp(-60.0 / LONG_S)),
        ),
    ),
}


@pytest.mark.parametrize(("prev", "rps", "now", "expected"), OBSERVE.values(), ids=OBSERVE.keys())
def test_observe(
    prev: RateTrend | None, rps: float | None, now: float, expected: RateTrend | None
) -> None:
    got = ramp.observe(prev, rps, now)
    assert got == (expected if expected is None else pytest.approx(expected))


def test_averages_do_not_depend_on_the_cycle_length() -> None:
    a = b = RateTrend(0.0, 10.0, 10.0)
    for i in range(1, 13):
        a = ramp.observe(a, 25.0, 5.0 * i) or a
    for i in range(1, 3):
        b = ramp.observe(b, 25.0, 30.0 * i) or b
    assert (a.short, a.long) == pytest.approx((b.short, b.long))


def feed(rate_at: Callable[[float], float], seconds: float, dt: float = 5.0) -> RateTrend:
    trend: RateTrend | None = None
    for i in range(int(seconds / dt) + 1):
        trend = ramp.observe(trend, rate_at(i * dt), i * dt)
    assert trend is not None
    return trend


def test_an_exponential_ramp_reads_low_but_close() -> None:
    """A rate doubling every 30 min: the first-order estimate reads it as slower (averages
    lag a growing rate by less than their time constant) and projects a rate between
    today's and the true one a lead ahead: it errs on the low side, never past the ramp."""
    doubling = 1800.0
    g = math.log(2) / doubling
    t = 7200.0
    trend = feed(lambda s: 4.0 * math.exp(g * s), t)
    assert trend.growth is not None
    assert 0.7 * g < trend.growth < g
    v = ramp.verdict(trend, 1.0, LEAD, 7200.0)
    assert v is not None and v.signal == "ramp"
    now_rate, true_ahead = 4.0 * math.exp(g * t), 4.0 * math.exp(g * (t + LEAD))
    assert now_rate < v.replicas <= math.ceil(true_ahead)
    assert v.need == 0  # a projection, not a need
    assert "doubling in" in v.note


# (rate over the last hour as a function of seconds, capacity, doubling threshold, asks)
VERDICTS = {
    "flat": (lambda s: 10.0, 1.0, 7200.0, None),
    "falling": (lambda s: 40.0 * math.exp(-s / 1800), 1.0, 7200.0, None),
    "rising-slower-than-the-threshold": (lambda s: 10.0 * 2 ** (s / 14400), 1.0, 7200.0, None),
    "steep-but-the-signal-is-off": (lambda s: 10.0 * 2 ** (s / 1200), 1.0, 0.0, None),
    "steep-but-no-capacity-learned": (lambda s: 10.0 * 2 ** (s / 1200), None, 7200.0, None),
    "steep-but-a-zero-capacity": (lambda s: 10.0 * 2 ** (s / 1200), 0.0, 7200.0, None),
    "a-10-s-burst-of-three-times-the-rate": (
        lambda s: 30.0 if 3590 <= s < 3600 else 10.0,
        1.0,
        7200.0,
        None,
    ),
    "a-step-to-a-higher-rate-reads-as-a-ramp-for-a-while": (
        lambda s: 20.0 if s >= 3300 else 10.0,
        1.0,
        7200.0,
        "asks",
    ),
    # Doubling every 5 min (read as ~10): the projection would be ~4x; the ask stops at 2x.
    "capped-at-twice-the-recent-rate": (lambda s: 1.0 * 2 ** (s / 300), 1.0, 7200.0, "capped"),
}


@pytest.mark.parametrize(
    ("rate_at", "capacity", "doubling", "expected"), VERDICTS.values(), ids=VERDICTS.keys()
)
def test_verdict(
    rate_at: Callable[[float], float], capacity: float | None, doubling: float, expected: str | None
) -> None:
    trend = feed(rate_at, 3600.0)
    v = ramp.verdict(trend, capacity, LEAD, doubling)
    if expected is None:
        assert v is None
        return
    assert v is not None and capacity is not None
    assert v.replicas > math.ceil(trend.short / capacity)  # asks ahead of the recent rate
    if expected == "capped":
        assert v.replicas == math.ceil(MAX_FACTOR * trend.short / capacity - 1e-9)


@pytest.mark.parametrize(
    ("trend", "growth"),
    [
        pytest.param(RateTrend(0.0, 20.0, 10.0), math.log(2.0) / (LONG_S - SHORT_S), id="doubled"),
        pytest.param(RateTrend(0.0, 0.0, 10.0), None, id="short-zero"),
        pytest.param(RateTrend(0.0, 10.0, 0.0), None, id="long-zero"),
    ],
)
def test_growth(trend: RateTrend, growth: float | None) -> None:
    assert trend.growth == (None if growth is None else pytest.approx(growth))


@pytest.mark.parametrize(
    ("swing", "typical"),
    [
        pytest.param(RateSwing(0.0, WARM_S - 1, 0.1, 0.2), None, id="not-warm-yet"),
        pytest.param(RateSwing(0.0, WARM_S, 0.1, 0.2), 0.5, id="warm-exactly"),
        pytest.param(RateSwing(0.0, WARM_S, 0.0, 0.0), None, id="no-weight"),
    ],
)
def test_typical_swing(swing: RateSwing, typical: float | None) -> None:
    assert swing.typical == (None if typical is None else pytest.approx(typical))


# (previous, the averages now, now, expected): |ln(short / long)| folded in by the time since.
_F = 1 - math.exp(-60.0 / SWING_S)
SWINGS = {
    "first-trend-starts-at-zero-weight": (
        None,
        RateTrend(5.0, 20.0, 10.0),
        5.0,
        RateSwing(5.0, 5.0),
    ),
    "no-trend-keeps-the-swing": (
        RateSwing(0.0, 5.0, 0.1, 0.2),
        None,
        10.0,
        RateSwing(0.0, 5.0, 0.1, 0.2),
    ),
    "a-zero-rate-keeps-the-swing": (
        RateSwing(0.0, 5.0, 0.1, 0.2),
        RateTrend(10.0, 0.0, 3.0),
        10.0,
        RateSwing(0.0, 5.0, 0.1, 0.2),
    ),
    "a-zero-long-average-keeps-the-swing": (
        RateSwing(0.0, 5.0, 0.1, 0.2),
        RateTrend(10.0, 3.0, 0.0),
        10.0,
        RateSwing(0.0, 5.0, 0.1, 0.2),
    ),
    "the-same-time-again-keeps-the-swing": (
        RateSwing(0.0, 100.0, 0.1, 0.2),
        RateTrend(100.0, 20.0, 10.0),
        100.0,
        RateSwing(0.0, 100.0, 0.1, 0.2),
    ),
    "weighted-by-the-time-since": (
        RateSwing(0.0, 100.0, 0.1, 0.2),
        RateTrend(160.0, 20.0, 10.0),
        160.0,
        RateSwing(0.0, 160.0, 0.1 + _F * (math.log(2.0) - 0.1), 0.2 + _F * 0.8),
    ),
    "a-clock-going-back-starts-afresh": (
        RateSwing(0.0, 100.0, 0.1, 0.2),
        RateTrend(50.0, 20.0, 10.0),
        50.0,
        RateSwing(50.0, 50.0),
    ),
}


@pytest.mark.parametrize(("prev", "trend", "now", "expected"), SWINGS.values(), ids=SWINGS.keys())
def test_swing(
    prev: RateSwing | None, trend: RateTrend | None, now: float, expected: RateSwing
) -> None:
    assert ramp.swing(prev, trend, now) == pytest.approx(expected)


def test_a_bursty_rate_swings_more_than_a_smooth_one_and_only_once_known() -> None:
    """The typical swing (what `pool.forecast.minRateSwing` reads): unknown for WARM_S, then
    small for a rate that drifts slowly, large for one that jumps every few minutes."""

    def smooth(s: float) -> float:  # a daily curve
        return 10.0 * (1.5 + math.sin(2 * math.pi * s / 86400))

    def bursty(s: float) -> float:  # 4 minutes at 4x, then 8 at 1x
        return 10.0 * (4.0 if (s // 240) % 3 == 0 else 1.0)

    def typical(rate_at: Callable[[float], float], seconds: float) -> float | None:
        trend, sw = None, None
        for i in range(int(seconds / 5.0) + 1):
            trend = ramp.observe(trend, rate_at(i * 5.0), i * 5.0)
            sw = ramp.swing(sw, trend, i * 5.0)
        assert sw is not None
        return sw.typical

    assert typical(smooth, WARM_S - 60) is None
    calm, rough = typical(smooth, 3 * WARM_S), typical(bursty, 3 * WARM_S)
    assert calm is not None and rough is not None
    assert calm < 0.1 < rough


# --- through decide and the cycle -------------------------------------------------------


def desired(d: ServiceDecision) -> int:
    """The target, which every decision these tests compare has (None only without data)."""
    assert d.desired is not None, d.reason
    return d.desired


def ramp_run(
    doubling_s: float, lead_s: float = LEAD, aside: bool = False
) -> list[tuple[ServiceDecision, PolicyState]]:
    """A service that meets its objective while its request rate doubles every 20 min;
    capacity learned at 1 req/s per replica. Replicas follow the target at once."""
    svc = make_svc(rampDoublingSeconds=doubling_s)
    state: PolicyState | None = None
    ready, out = 4, []
    for i in range(0, 360):
        now = 5.0 * i
        rps = 3.0 * 2 ** (now / 1200)
        load = make_load(MET, rps, ready=ready, running=rps)
        d, state = decide(svc, load, state, now, lead_s=lead_s, ramp_aside=aside)
        if i == 0:
            state = replace(state, learned=Learned(capacity_rps=1.0))
        out.append((d, state))
        ready = d.desired or ready
    return out


def test_a_steep_ramp_raises_ahead_of_the_rate_and_explain_says_so() -> None:
    on, off = ramp_run(7200.0), ramp_run(0.0)
    d_on, d_off = on[-1][0], off[-1][0]
    assert desired(d_on) > desired(d_off)
    assert d_on.decided_by == "ramp"
    assert not any(v.signal == "ramp" for v in d_off.signals)
    text = format_decision(d_on)
    assert "ramp asks" in text and "min to double the request rate" in text
    # Raised while the slo signal alone (the last window's rate) asked less.
    (slo,) = [v for v in d_on.signals if v.signal == "slo"]
    assert slo.replicas < desired(d_on)


def test_standing_aside_the_ramp_asks_nothing_and_the_averages_go_on() -> None:
    """`core.cycle` sets it aside where the forecast covers a rate that swings."""
    on, aside = ramp_run(7200.0), ramp_run(7200.0, aside=True)
    assert not any(v.signal == "ramp" for d, _ in aside for v in d.signals)
    assert desired(aside[-1][0]) < desired(on[-1][0])
    assert aside[-1][1].trend == on[-1][1].trend  # back in, it reads the rise at once


def test_the_projection_is_never_a_recorded_need() -> None:
    """The forecast's history and the adaptive reserve read `_reactive_need`: what the
    load's own signals asked, not the ramp's projection."""
    svc = make_svc()
    d = ramp_run(7200.0)[-1][0]
    (r,) = [v for v in d.signals if v.signal == "ramp"]
    need = _reactive_need(svc, d)
    assert need is not None and need < r.replicas


def test_a_longer_lead_asks_more() -> None:
    short, long = ramp_run(7200.0, lead_s=120.0), ramp_run(7200.0, lead_s=LEAD)
    assert desired(long[-1][0]) > desired(short[-1][0])


def test_stale_data_keeps_the_averages_and_asks_nothing_new() -> None:
    out = ramp_run(7200.0)
    d, st = out[-1]
    stale = replace(make_load(None, None), complete=False, unhealthy=1)
    d2, after = decide(make_svc(), stale, st, 5.0 * 360, lead_s=LEAD)
    assert not d2.fresh and after.trend == st.trend
    assert desired(d2) >= desired(d)


def test_while_the_slo_signal_holds_a_breach_the_window_keeps_the_rates_ask() -> None:
    """After an answered breach the slo signal holds and the scale-down window keeps only
    the request rate's ask; so it does of the ramp's projection (a burst that breached also
    reads as a rise: holding its projection a window longer cost the coding week)."""
    svc = make_svc()
    d, st = ramp_run(7200.0)[-1]
    now = 5.0 * 360
    rate = 3.0 * 2 ** (now / 1200)
    # Half the requests missed before the last raise took effect (raise + 120-s cold start);
    # all met since: the slo signal holds what exists.
    missed = tuple(SloEntry(now - 250 + 5 * i, 50.0, 100.0, rate, 8) for i in range(20))
    st = replace(st, raised_at=now - 200, slo_window=missed)
    load = make_load(MET, rate, ready=desired(d), running=rate)
    d2, _ = decide(svc, load, st, now, lead_s=LEAD)
    (slo,) = [v for v in d2.signals if v.signal == "slo"]
    (r,) = [v for v in d2.signals if v.signal == "ramp"]
    assert "holding" in slo.note and slo.calm is not None
    assert r.calm == min(r.replicas, slo.calm) and r.calm < r.replicas
