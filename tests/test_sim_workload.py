"""Bench workload: real curves and lengths, peak scaling, seeded reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.sim.workload import (
    DAY,
    TRACES,
    azure2023,
    load_curve,
    make_workload,
    stationary_workload,
)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_every_trace_loads_with_positive_rates(name: str) -> None:
    c = load_curve(name)
    assert c.rate.size > 100 and np.all(c.rate > 0)
    assert np.all(np.diff(c.t) > 0)


def test_unknown_trace_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="azure-code-week"):
        load_curve("nope")


def test_azure_code_week_shape_matches_readme() -> None:
    """traces/README.md: weekday peak/trough 10-13×, peak at 19-20 UTC."""
    c = load_curve("azure-code-week")
    day0 = (c.t < DAY) & (c.t >= 0)
    hours = (c.t[day0] // 3600).astype(int)
    hourly = np.array([c.rate[day0][hours == h].mean() for h in range(24)])
    assert 8 < hourly.max() / hourly.min() < 15
    assert int(np.argmax(hourly)) in (18, 19, 20)


@pytest.mark.parametrize(
    ("name", "weekday"),
    [("azure-code-week", "Friday"), ("azure-conv-week", "Sunday"), ("servegen-large", None)],
)
def test_traces_with_known_dates_start_on_their_weekday(name: str, weekday: str | None) -> None:
    """data/README.md: the coding week starts Fri 10 May 2024, the conversation week Sun
    12 May, 00:00 UTC; ServeGen gives day numbers only. Ours' forecast reads weekdays off
    this calendar (`pool.forecast.weekendDays`)."""
    import datetime

    from scaler.sim.workload import shuffle_days

    c = load_curve(name)
    if weekday is None:
        assert c.start_unix is None
        return
    assert c.start_unix is not None
    start = datetime.datetime.fromtimestamp(c.start_unix, datetime.UTC)
    assert (start.strftime("%A"), start.hour, start.minute) == (weekday, 0, 0)
    assert start.date().isoformat().startswith("2024-05-1")
    assert shuffle_days(c, np.random.default_rng(1)).start_unix is None  # no calendar left


def test_ours_reads_the_traces_calendar() -> None:
    from scaler.sim.scenario import Calibration, Scenario, make_policies, pool_config

    scn = Scenario(days=1.0 / 24, trace="azure-conv-week")
    cal = Calibration(1.0, 1, 1.0, 1.0, 0.0)
    w = stationary_workload("conv", 1.0, 60.0, np.random.default_rng(1))
    pols, _ = make_policies(scn, pool_config(scn, cal), cal, w, -60.0, 60.0, 1715472000.0)
    assert pols["ours"].calendar_offset == 1715472000.0  # type: ignore[attr-defined]


def test_scaled_peak_and_reproducible() -> None:
    c = load_curve("azure-conv-week")
    kw = {"start_s": DAY, "duration_s": 6 * 3600.0, "peak_rps": 3.0}
    a = make_workload(c, rng=np.random.default_rng(5), **kw)  # type: ignore[arg-type]
    b = make_workload(c, rng=np.random.default_rng(5), **kw)  # type: ignore[arg-type]
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.prompt, b.prompt)
    # Mean curve scaled to peak 3 req/s; the per-minute band modulates around it.
    assert 0.5 * 3.0 < np.median(a.rate) < 3.0 * 1.2
    counts = np.histogram(a.arrival, bins=np.arange(0, 6 * 3600 + 1, 600))[0] / 600
    assert counts.max() < 3.0 * 1.6 and counts.mean() > 1.0
    assert np.all(np.diff(a.arrival) >= 0)
    i, j = a.arrivals(3600.0, 3660.0)
    assert np.all((a.arrival[i:j] >= 3600) & (a.arrival[i:j] < 3660))


def test_lengths_come_from_the_real_trace() -> None:
    p, o, gaps = azure2023("conv")
    w = stationary_workload("conv", 5.0, 600.0, np.random.default_rng(1))
    assert set(zip(w.prompt.tolist(), w.output.tolist(), strict=True)) <= set(
        zip(p.tolist(), o.tolist(), strict=True)
    )
    assert gaps.mean() == pytest.approx(1.0)
    assert len(w) == pytest.approx(3000, rel=0.15)


@pytest.mark.parametrize("burst", ["empirical", "poisson"])
def test_arrival_rate_matches_the_target(burst: str) -> None:
    w = stationary_workload("conv", 20.0, 1800.0, np.random.default_rng(2), burst=burst)  # type: ignore[arg-type]
    assert len(w) / 1800.0 == pytest.approx(20.0, rel=0.1)


def test_code_bursts_are_burstier_than_poisson() -> None:
    emp = stationary_workload("code", 5.0, 3600.0, np.random.default_rng(3))
    poi = stationary_workload("code", 5.0, 3600.0, np.random.default_rng(3), burst="poisson")

    def cv(w: object) -> float:
        c = np.bincount(w.arrival.astype(int), minlength=3600)  # type: ignore[attr-defined]
        return float(c.std() / c.mean())

    assert cv(emp) > 1.5 * cv(poi)


def test_span_outside_the_trace_is_an_error() -> None:
    with pytest.raises(ValueError, match="spans"):
        make_workload(
            load_curve("servegen-r1"),
            start_s=0.0,
            duration_s=3 * DAY,
            peak_rps=1.0,
            rng=np.random.default_rng(0),
        )


def test_shuffled_days_keep_each_day_whole_and_every_day_once() -> None:
    from scaler.sim.workload import shuffle_days

    curve = load_curve("azure-code-week")
    sh = shuffle_days(curve, np.random.default_rng(5))
    days = int(curve.span_s // DAY)
    assert sh.t.size == days * 1440 and sh.window_s == 60.0
    per_min = np.interp(sh.t + 30.0, curve.t + curve.window_s / 2, curve.rate).reshape(days, -1)
    got = sh.rate.reshape(days, -1)
    order = [int(x) for x in sh.name.split(": ")[1].rstrip(")").split(",")]
    assert sorted(order) == list(range(days)) and order != list(range(days))
    for i, d in enumerate(order):
        assert np.array_equal(got[i], per_min[d])  # a whole day, unchanged


def test_shuffling_a_single_day_is_an_error() -> None:
    from scaler.sim.workload import RateCurve, shuffle_days

    one = RateCurve("one", np.array([0.0]), np.array([1.0]), None, None, DAY, "conv")
    with pytest.raises(ValueError, match="nothing to shuffle"):
        shuffle_days(one, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("trace", "start_day", "shuffle", "first_day"),
    [
        ("azure-code-week", 0.0, False, "Friday 2024-05-10"),
        ("azure-code-week", 2.0, False, "Sunday 2024-05-12"),
        ("azure-conv-week", 1.0, False, "Monday 2024-05-13"),
        ("azure-code-week", 0.0, True, "Thursday 1970-01-01"),  # shuffled: no calendar
        ("servegen-large", 1.0, False, "Thursday 1970-01-01"),  # day numbers only
    ],
    ids=["code", "code-from-day-2", "conv-from-day-1", "shuffled", "servegen"],
)
def test_ours_clock_starts_on_the_first_simulated_day(
    trace: str, start_day: float, shuffle: bool, first_day: str
) -> None:
    """`run_scenario` hands ours this calendar: the weekday its forecast reads at t = 0."""
    import datetime

    from scaler.sim.scenario import Scenario, calendar_start
    from scaler.sim.workload import shuffle_days

    c = load_curve(trace)
    if shuffle:
        c = shuffle_days(c, np.random.default_rng(1))
    at = calendar_start(c, Scenario(trace=trace, start_day=start_day))
    day = datetime.datetime.fromtimestamp(at, datetime.UTC)
    assert day.strftime("%A %Y-%m-%d") == first_day and (day.hour, day.minute) == (0, 0)
