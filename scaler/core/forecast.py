"""Forecast-aware decisions: a bounded per-service history of needed replicas by time slot,
and what it predicts. Pure: the caller passes the wall-clock time (`calendar`, Unix seconds).

History: per service and calendar day, the largest need the load showed (each signal's
`need`: replicas the load needs however many exist, never the forecast's own ask) in each
`pool.forecast.slotSeconds` slot; `historyDays` days are kept (a few KB per service). Days
and slots are the dates and clock times of the service's zone (`inference[].calendar`, else
`pool.forecast.timeZone`, default UTC).
Prediction for a future instant: the same slot on the same weekday of past weeks when the
history has them, else the same slot of the last three days of the same kind (weekday or
`weekendDays`; a Tuesday after a weekend from Monday and Friday: on the bench's
conversation week 93.3 -> 95.7 % of the oracle's harvest), else of the last three days;
the most that a majority of those days needed (the median, the lower one of an even count:
of two days, what both needed; the upper one held a need seen on one day of two all the
next day, on ServeGen 1925 inference GPU-hours against 1768). Each slot already holds the
day's largest need in it,
so the largest over days as well (the rule before) was a peak of peaks: on the bench's
coding week it asked 24 % more inference GPU-hours than the oracle at equal attainment.

The forecast is not used (`Prediction.replicas` None, with the reason) when:
* the history holds less than `minHistoryDays` of observed slots;
* no past day has the slots asked about;
* today is quieter than the history: over the last `fitHours` of today, the observed need
  is below what the history predicted for those slots by more than `maxErrorFraction` of
  the prediction on average (and by more than one replica): a day unlike the others (a
  weekend after weekdays, a holiday), where the forecast would hold GPUs for nothing.
  A busier day keeps it: the forecast is then a floor the reactive signals exceed anyway
  (the absolute error used before also dropped it on ordinary bursty days, half the time
  on the coding week).

A day quieter than the history but within that bound gets the history's shape at today's
level: the prediction is scaled by observed / predicted over those hours (never up). Days
differ in level more than in shape (ServeGen); unscaled, the forecast held the busier
days' level all day, replicas above anything today needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from zoneinfo import ZoneInfo

from scaler.config import WEEKDAYS, Forecast

DAY = 86400.0
WEEK_DAYS = 7
_LOOKBACK_DAYS = 3  # without a week of history: the same slot of the last three days
_NONE = -1  # a slot without observations


@dataclass(frozen=True, slots=True)
class History:
    """Needed replicas per calendar day (day number of the local date in `tz`, counted
    like Unix days) and slot of local time; -1 = not observed."""

    slot_s: float
    days: Mapping[int, tuple[int, ...]]
    tz: str = "UTC"  # IANA name; the days and slots are this zone's dates and clock times

    @property
    def slots_per_day(self) -> int:
        return max(1, round(DAY / self.slot_s))

    def observed_days(self) -> float:
        return sum(sum(1 for v in d if v >= 0) for d in self.days.values()) / self.slots_per_day


def empty(cfg: Forecast) -> History:
    return History(cfg.slotSeconds, MappingProxyType({}), cfg.timeZone)


def local_seconds(tz: str, t: float) -> float:
    """Unix seconds `t` as the zone's wall clock, counted like Unix seconds: its day number
    is the local date's and its time of day the local clock's. A daily peak at 09:00 in
    Berlin stays in the same slot across a daylight-saving change (in UTC it moves an hour);
    the 25-h day's repeated hour shares its slots, the 23-h day leaves one hour unobserved."""
    if tz == "UTC":
        return t
    off = datetime.fromtimestamp(t, ZoneInfo(tz)).utcoffset()  # ZoneInfo caches the zone
    return t + (off.total_seconds() if off is not None else 0.0)


def _slot_at(h: History, local: float) -> tuple[int, int]:
    """(day, slot) of a local time (`local_seconds`)."""
    day = math.floor(local / DAY)
    return day, min(h.slots_per_day - 1, int((local - day * DAY) // h.slot_s))


def _where(h: History, t: float) -> tuple[int, int]:
    """(local day, slot) of Unix seconds `t`."""
    return _slot_at(h, local_seconds(h.tz, t))


def record(h: History | None, cfg: Forecast, t: float, needed: int) -> History:
    """The history with `needed` replicas observed at `t` (Unix seconds); old days dropped.
    A changed slot length or time zone starts a new history (the old slots do not line up)."""
    if h is None or h.slot_s != cfg.slotSeconds or h.tz != cfg.timeZone:
        h = empty(cfg)
    day, slot = _where(h, t)
    today = h.days.get(day) or (_NONE,) * h.slots_per_day
    if today[slot] >= needed:
        days = h.days
    else:
        row = list(today)
        row[slot] = needed
        days = {d: v for d, v in h.days.items() if day - cfg.historyDays < d <= day}
        days[day] = tuple(row)
        days = MappingProxyType(days)
    if len(days) > cfg.historyDays:
        days = MappingProxyType({d: v for d, v in days.items() if day - cfg.historyDays < d})
    return History(h.slot_s, days, h.tz)


def weekend(cfg: Forecast) -> frozenset[int]:
    """`weekendDays` as weekday numbers (Monday 0 ... Sunday 6)."""
    return frozenset(WEEKDAYS.index(d) for d in cfg.weekendDays)


def weekday(day: int) -> int:
    """Monday 0 ... Sunday 6 of a day number (day 0, 1 January 1970, was a Thursday)."""
    return (day + 3) % WEEK_DAYS


def _last(n: int, what: str) -> str:
    return f"the last {what}" if n == 1 else f"the last {n} {what}s"


def _predict_slot(
    h: History, at: tuple[int, int], now: tuple[int, int], weekend_days: frozenset[int]
) -> tuple[int, str] | None:
    """(replicas, which days they come from) for the (day, slot) `at`, asked at (day, slot)
    `now`; None: no day has it."""
    day, slot = at
    today, now_slot = now
    vals = []
    for d in [day - k * WEEK_DAYS for k in range(1, 6)]:
        if d in h.days and h.days[d][slot] >= 0:
            vals.append(h.days[d][slot])
    basis = "the same weekday of past weeks"
    off = weekday(day) in weekend_days  # this day's kind

    def last_days(same_kind: bool) -> list[int]:
        out: list[int] = []
        for d in sorted(h.days, reverse=True):
            if len(out) == _LOOKBACK_DAYS or (not same_kind and d < day - _LOOKBACK_DAYS):
                break
            if d >= day or d > today or (d == today and slot >= now_slot):
                continue  # not observed yet (or still being observed)
            if same_kind and (weekday(d) in weekend_days) != off:
                continue
            if h.days[d][slot] >= 0:
                out.append(h.days[d][slot])
        return out

    if not vals and weekend_days:
        vals = last_days(same_kind=True)
        basis = _last(len(vals), "weekend day" if off else "weekday")
    if not vals:
        vals = last_days(same_kind=False)
        basis = _last(len(vals), "day")
    if not vals:
        return None
    vals.sort()
    return vals[(len(vals) - 1) // 2], basis  # the most a majority of the days needed


@dataclass(frozen=True, slots=True)
class Prediction:
    replicas: int | None  # most replicas needed within the horizon; None: not used
    note: str  # why not used, or what it is based on


def _fit_error(h: History, cfg: Forecast, now: float) -> tuple[float, float] | None:
    """(mean (predicted - observed), mean predicted) over today's last fitHours of slots:
    how much quieter than the history today is (negative: busier)."""
    today, now_slot = _where(h, now)
    row = h.days.get(today)
    if row is None:
        return None
    n = max(1, round(cfg.fitHours * 3600 / h.slot_s))
    errs, preds = [], []
    days_off = weekend(cfg)
    for slot in range(max(0, now_slot - n), now_slot):  # complete slots only
        obs = row[slot]
        if obs < 0:
            continue
        got = _predict_slot(h, (today, slot), (today, slot), days_off)
        if got is None:
            continue
        errs.append(got[0] - obs)
        preds.append(got[0])
    if not errs:
        return None
    return sum(errs) / len(errs), sum(preds) / len(preds)


def predict(h: History | None, cfg: Forecast, now: float, horizon_s: float) -> Prediction:
    """Most replicas the history says the service needs within [now, now + horizon_s]."""
    if h is None or not h.days:
        return Prediction(None, "no history yet: reactive only")
    have = h.observed_days()
    if have < cfg.minHistoryDays:
        return Prediction(
            None, f"{have:.1f} of {cfg.minHistoryDays:g} days of history: reactive only"
        )
    fit = _fit_error(h, cfg, now)
    scale = 1.0
    if fit is not None:
        err, mean = fit
        if err > 1.0 and err > cfg.maxErrorFraction * max(mean, 1.0):
            return Prediction(
                None,
                f"today does not fit the history ({err:.1f} replicas quieter on average over "
                f"the last {cfg.fitHours:g} h): reactive only",
            )
        if err > 0 and mean > 0:
            scale = 1.0 - err / mean
    best: int | None = None
    t = local_seconds(h.tz, now)  # stepped in local time: every slot the horizon touches
    end = t + max(0.0, horizon_s)
    at_now = _slot_at(h, t)
    days_off = weekend(cfg)
    basis = ""
    while True:
        got = _predict_slot(h, _slot_at(h, t), at_now, days_off)
        if got is not None and (best is None or got[0] > best):
            best, basis = got
        if t >= end:
            break
        t = min(end, (math.floor(t / h.slot_s) + 1) * h.slot_s)
    if best is None:
        return Prediction(None, "no past day has these hours: reactive only")
    zone = "" if h.tz == "UTC" else f" in {h.tz} time"  # which days "weekday" means
    note = f"most needed within {horizon_s:.0f} s ({have:.1f} days of history{zone}; from {basis})"
    if scale < 1.0:
        scaled = max(0, math.ceil(best * scale - 1e-9))
        note += f", {best} scaled to today's level ({scale:.0%} of the history): {scaled}"
        best = scaled
    return Prediction(best, note)


def recent_peak(h: History | None, now: float, span_s: float) -> int | None:
    """Most replicas needed in the slots that overlap [now - span_s, now] (today's and, at
    midnight, yesterday's): the persistence forecast. Inference that needed these replicas
    within a research class's checkpoint interval is likely to need them again within the
    next one (bursty traffic), so lending them would start a Job that is preempted before
    it saves anything. None: no slot observed in the span."""
    if h is None or not h.days:
        return None
    best: int | None = None
    end = local_seconds(h.tz, now)
    t = end - max(0.0, span_s)
    while True:
        day, slot = _slot_at(h, t)
        row = h.days.get(day)
        if row is not None and row[slot] >= 0:
            best = row[slot] if best is None else max(best, row[slot])
        if t >= end:
            break
        t = min(end, (math.floor(t / h.slot_s) + 1) * h.slot_s)
    return best
