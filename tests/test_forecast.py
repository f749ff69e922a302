"""The forecast (scaler/core/forecast.py) and its research limit (accounting.split_pool's
`withhold`): bounded history, what it predicts, when it falls back to reactive, and that it
only ever adds to inference or withholds from research. Times are injected."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from scaler.config import Config, ConfigError, Forecast, parse_config
from scaler.core.accounting import Capacity, split_pool
from scaler.core.cycle import CycleInput, CycleState, step
from scaler.core.decision import ServiceDecision
from scaler.core.forecast import DAY, History, predict, record, weekday, weekend
from scaler.core.load import EngineSample, TargetPhase, TargetState
from scaler.core.policy import PolicyState
from scaler.core.ramp import GAP_S, WARM_S, RateSwing, RateTrend
from scaler.core.reserve import ReserveTracker
from tests.test_slo import hist

FC = Forecast(enabled=True, slotSeconds=600, historyDays=21, minHistoryDays=1, fitHours=2)
MON = 19_723 * DAY  # Monday 2024-01-01 00:00 UTC (Unix day 19723)


def days_of(pattern: list[int], n_days: float, fc: Forecast = FC, start: float = MON) -> History:
    """n_days of the same daily pattern (one value per hour, held for each slot)."""
    h: History | None = None
    per_day = int(DAY // fc.slotSeconds)
    for d in range(int(n_days + 0.999)):
        for s in range(min(per_day, round((n_days - d) * per_day))):
            t = start + d * DAY + s * fc.slotSeconds
            h = record(h, fc, t, pattern[int(s * fc.slotSeconds // 3600)])
    assert h is not None
    return h


RAMP = [2] * 8 + [4, 8, 12, 12, 12, 12, 12, 12, 10, 8, 6, 4] + [2] * 4  # 24 hourly values
PEAK_AT_8 = [2] * 8 + [12] + [2] * 15


def test_history_is_bounded() -> None:
    fc = Forecast(enabled=True, historyDays=3, minHistoryDays=1)
    h = days_of(RAMP, 10, fc)
    assert len(h.days) == 3 and max(h.days) == 19_723 + 9
    assert all(len(v) == 144 for v in h.days.values())


def test_record_keeps_the_largest_need_per_slot() -> None:
    h = record(None, FC, MON + 10, 3)
    h = record(h, FC, MON + 20, 7)
    h = record(h, FC, MON + 30, 5)
    assert h.days[19_723][0] == 7 and h.days[19_723][1] == -1


PREDICT: dict[str, tuple[History | None, float, float, int | None, str]] = {
    # history, now (offset into the day after the history), horizon, replicas, note
    "no-history": (None, 7 * 3600, 1800, None, "no history yet"),
    "half-a-day-is-too-short": (days_of(RAMP, 0.5), 7 * 3600 - DAY, 1800, None, "0.5 of 1"),
    "one-day-predicts-the-ramp-ahead": (days_of(RAMP, 1), 7.6 * 3600, 1800, 4, "1.0 days"),
    "horizon-reaches-further-up": (days_of(RAMP, 1), 7.6 * 3600, 3 * 3600, 12, "within 10800"),
    "quiet-hours-predict-quiet": (days_of(RAMP, 3), 2 * 3600, 1800, 2, "3.0 days"),
    # every slot the horizon touches, not only its two ends (07:36 and 10:36 need 2)
    "a-peak-inside-the-horizon": (days_of(PEAK_AT_8, 1), 7.6 * 3600, 3 * 3600, 12, "within"),
}


@pytest.mark.parametrize(
    ("h", "offset", "horizon", "replicas", "note"), PREDICT.values(), ids=PREDICT.keys()
)
def test_predict(
    h: History | None, offset: float, horizon: float, replicas: int | None, note: str
) -> None:
    n_days = 0 if h is None or not h.days else max(h.days) - 19_723 + 1
    p = predict(h, FC, MON + n_days * DAY + offset, horizon)
    assert p.replicas == replicas
    assert note in p.note


def test_same_weekday_wins_over_yesterday() -> None:
    # A week where Sunday (day 6) is quiet: next Sunday predicts Sunday's, not Saturday's.
    h: History | None = None
    for d in range(7):
        pattern = [1] * 24 if d == 6 else RAMP
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, pattern[s // 6])
    assert h is not None
    sunday_noon = MON + 13 * DAY + 12 * 3600
    p = predict(h, FC, sunday_noon, 600)
    assert p.replicas == 1 and "from the same weekday of past weeks" in p.note
    assert predict(h, FC, sunday_noon - DAY, 600).replicas == 12  # Saturday as on Saturday


THU = MON + 3 * DAY  # Thursday 2024-01-04
QUIET = [1] * 24
KINDS: dict[str, tuple[list[list[int]], int, list[str], int, str]] = {
    # daily patterns from Thursday on, day predicted (offset from Thursday), weekendDays,
    # replicas at noon, the days they come from (`explain`'s forecast note)
    "monday-from-the-weekdays-not-the-weekend": (
        [RAMP, RAMP, QUIET, QUIET],
        4,
        ["Saturday", "Sunday"],
        12,
        "the last 2 weekdays",
    ),
    "monday-every-day-alike-is-the-last-three": (
        [RAMP, RAMP, QUIET, QUIET],
        4,
        [],
        1,
        "the last 3 days",
    ),
    "sunday-from-saturday": (
        [RAMP, RAMP, QUIET],
        3,
        ["Saturday", "Sunday"],
        1,
        "the last weekend day",
    ),
    "sunday-every-day-alike": ([RAMP, RAMP, QUIET], 3, [], 12, "the last 3 days"),
    "saturday-without-a-weekend-yet-is-the-last-three": (
        [RAMP, RAMP],
        2,
        ["Saturday", "Sunday"],
        12,
        "the last 2 days",
    ),
    "a-custom-weekend-sunday-from-thursday": (
        [QUIET, RAMP, RAMP],
        3,
        ["Thursday", "Sunday"],
        1,
        "the last weekend day",
    ),
}


@pytest.mark.parametrize(
    ("days", "day", "weekend", "replicas", "basis"), KINDS.values(), ids=KINDS.keys()
)
def test_without_a_week_the_forecast_reads_days_of_the_same_kind(
    days: list[list[int]], day: int, weekend: list[str], replicas: int, basis: str
) -> None:
    """Without a week of history a slot comes from the last days of its kind (weekday or
    `weekendDays`), else from the last three days: a Monday after a quiet weekend is not
    predicted quiet, a Sunday after a quiet Saturday not busy."""
    fc = FC.model_copy(update={"weekendDays": weekend})
    h: History | None = None
    for d, pattern in enumerate(days):
        for s in range(144):
            h = record(h, fc, THU + d * DAY + s * 600, pattern[s // 6])
    assert h is not None
    p = predict(h, fc, THU + day * DAY + 12 * 3600, 600)
    assert p.replicas == replicas, p.note
    assert p.note.endswith(f"from {basis})"), p.note


def test_weekday_numbers() -> None:
    assert [weekday(19_723 + d) for d in range(7)] == [0, 1, 2, 3, 4, 5, 6]  # Mon 2024-01-01
    assert weekday(0) == 3  # 1 January 1970 was a Thursday
    assert weekend(Forecast()) == frozenset({5, 6})


@pytest.mark.parametrize(
    ("days", "error"),
    [
        (["Saturday", "Saturday"], "listed twice: Saturday"),
        (
            ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
            "all seven",
        ),
        (["saturday"], "Saturday"),
    ],
    ids=["duplicate", "all-seven", "lowercase"],
)
def test_weekend_days_are_validated(days: list[str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Forecast.model_validate({"weekendDays": days})  # as a values file gives them


SAT_0300_UTC = MON + 5 * DAY + 3 * 3600  # Saturday 2024-01-06 03:00 UTC
WHERE: dict[str, tuple[str, int, int]] = {
    # pool.forecast.timeZone, weekday of the row the observation lands in, its slot (600 s)
    "utc": ("UTC", 5, 18),
    "new-york-is-still-friday-evening": ("America/New_York", 4, 22 * 6),
    "tokyo-is-saturday-noon": ("Asia/Tokyo", 5, 12 * 6),
    "kathmandu-a-quarter-hour-offset": ("Asia/Kathmandu", 5, 8 * 6 + 4),  # 08:45 local
}


@pytest.mark.parametrize(("zone", "day", "slot"), WHERE.values(), ids=WHERE.keys())
def test_the_history_keeps_the_zones_dates_and_clock(zone: str, day: int, slot: int) -> None:
    fc = FC.model_copy(update={"timeZone": zone})
    h = record(None, fc, SAT_0300_UTC, 7)
    ((d, row),) = h.days.items()
    assert h.tz == zone and weekday(d) == day
    assert [i for i, v in enumerate(row) if v >= 0] == [slot] and row[slot] == 7


@pytest.mark.parametrize(
    ("zone", "replicas"),
    [
        # Berlin's 09:00 peak is 08:00 UTC in winter time and 07:00 UTC from 31 March: in
        # local time the Monday after the change is predicted from the days before it.
        pytest.param("Europe/Berlin", 12, id="local-clock-keeps-the-peak"),
        # The same observations in UTC days predict the peak an hour late.
        pytest.param("UTC", 2, id="utc-predicts-it-an-hour-late"),
    ],
)
def test_a_daily_peak_follows_daylight_saving_time(zone: str, replicas: int) -> None:
    fc = FC.model_copy(update={"timeZone": zone, "weekendDays": []})
    berlin_winter = 3600.0  # UTC+1 until Sunday 31 March 2024 01:00 UTC
    wed = MON + (31 + 29 + 26) * DAY  # Wednesday 27 March 2024 00:00 UTC
    h: History | None = None
    for d in range(4):  # Wednesday to Saturday, a peak 09:00-10:00 Berlin time
        for s in range(144):
            t = wed + d * DAY + s * 600 - berlin_winter  # local midnight onwards
            h = record(h, fc, t, 12 if s // 6 == 9 else 2)
    assert h is not None
    monday_0855_berlin = wed + 5 * DAY + 8 * 3600 + 55 * 60 - 2 * 3600  # summer time: UTC+2
    p = predict(h, fc, monday_0855_berlin, 600)
    assert p.replicas == replicas, p.note
    assert ("days of history in Europe/Berlin time;" in p.note) == (zone != "UTC"), p.note


def test_the_repeated_hour_of_the_long_day_shares_its_slots() -> None:
    """27 October 2024 in Berlin: 02:30 comes twice (00:30 and 01:30 UTC)."""
    fc = FC.model_copy(update={"timeZone": "Europe/Berlin"})
    sunday = MON + (366 - 66) * DAY  # Sunday 27 October 2024 00:00 UTC
    h = record(None, fc, sunday + 1800, 3)
    h = record(h, fc, sunday + 5400, 5)
    ((d, row),) = h.days.items()
    assert weekday(d) == 6 and row[2 * 6 + 3] == 5 and sum(v >= 0 for v in row) == 1


def test_another_zone_starts_a_new_history() -> None:
    h = days_of(RAMP, 2)
    berlin = FC.model_copy(update={"timeZone": "Europe/Berlin"})
    h2 = record(h, berlin, MON + 2 * DAY, 3)
    assert h2.tz == "Europe/Berlin" and len(h2.days) == 1


@pytest.mark.parametrize("zone", ["Mars/Olympus", "Europe", ""])
def test_an_unknown_time_zone_is_refused(zone: str) -> None:
    with pytest.raises(ValueError, match=r"timeZone\n.*unknown time zone"):
        Forecast(timeZone=zone)


def test_a_day_unlike_the_others_falls_back_to_reactive() -> None:
    h = days_of(RAMP, 3)
    today = MON + 3 * DAY
    for s in range(8 * 6, 11 * 6):  # 08:00-11:00 observed quiet instead of the ramp
        h = record(h, FC, today + s * 600, 2)
    p = predict(h, FC, today + 11 * 3600, 1800)
    assert p.replicas is None and "does not fit" in p.note
    # The same hours as the history predicted: it is used.
    h2 = days_of(RAMP, 3)
    for s in range(8 * 6, 11 * 6):
        h2 = record(h2, FC, today + s * 600, RAMP[s // 6])
    assert predict(h2, FC, today + 11 * 3600, 1800).replicas == 12


# Today from 08:00 observed as {slots: replicas needed}; at 11:00 (fitHours 2) the
# forecast of the RAMP history is used or not. (observed, replicas, words in the note)
FIT = {
    "needing-none-is-quieter-than-the-history": ({range(48, 66): 0}, None, "does not fit"),
    "the-fit-reads-fitHours-not-the-last-slot": (
        {range(48, 65): 2, range(65, 66): 12},  # quiet until 10:50, as the history after
        None,
        "does not fit",
    ),
    "the-same-hours-as-the-history": ({range(48, 66): -1}, 12, "days of history"),
}


@pytest.mark.parametrize(("observed", "replicas", "note"), FIT.values(), ids=FIT.keys())
def test_today_is_fitted_over_its_last_fit_hours(
    observed: dict[range, int], replicas: int | None, note: str
) -> None:
    h = days_of(RAMP, 3)
    today = MON + 3 * DAY
    for slots, need in observed.items():
        for s in slots:  # -1: what the history needed there
            h = record(h, FC, today + s * 600, RAMP[s // 6] if need < 0 else need)
    p = predict(h, FC, today + 11 * 3600, 1800)
    assert p.replicas == replicas and note in p.note


# History at one level all day (3 days), today 09:00-11:00 at another; at 11:00 (fitHours 2):
# (history, today, maxErrorFraction, replicas, words in the note). A day quieter by at most
# one replica, or by exactly maxErrorFraction, fits and is scaled to its level.
FIT_EDGES = {
    "one-replica-quieter-is-within-noise": (2, 1, 0.35, 1, "scaled to today's level (50%"),
    "quieter-by-exactly-maxErrorFraction-fits": (8, 6, 0.25, 6, "(75% of the history): 6"),
    "quieter-by-more-does-not-fit": (8, 5, 0.25, None, "does not fit"),
}


@pytest.mark.parametrize(
    ("level", "today_level", "fraction", "replicas", "note"),
    FIT_EDGES.values(),
    ids=FIT_EDGES.keys(),
)
def test_the_fit_s_edges(
    level: int, today_level: int, fraction: float, replicas: int | None, note: str
) -> None:
    fc = FC.model_copy(update={"maxErrorFraction": fraction})
    h = days_of([level] * 24, 3, fc)
    today = MON + 3 * DAY
    for s in range(9 * 6, 11 * 6):
        h = record(h, fc, today + s * 600, today_level)
    p = predict(h, fc, today + 11 * 3600, 1800)
    assert p.replicas == replicas and note in p.note, p.note


def test_the_last_days_are_the_last_three_of_their_kind() -> None:
    """Without the same weekday in the history, a weekday comes from the last three
    weekdays, not from every weekday kept (the older ones, here quieter, are older news)."""
    h: History | None = None
    for d in (0, 1, 2, 3, 7, 8, 9, 10):  # Mon-Thu of two weeks; no Friday, no weekend
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, 12 if d >= 8 and s == 72 else 2)
    p = predict(h, FC, MON + 11 * DAY + 12 * 3600, 0)  # Friday noon
    assert p.replicas == 12 and p.note.endswith("from the last 3 weekdays)"), p.note


def test_today_s_early_slots_predict_tomorrow_s() -> None:
    """Near midnight the horizon reaches tomorrow's first slot: today's own first slot (long
    observed) is one of the last three days, as yesterday's is."""
    h: History | None = None
    for d in range(4):  # Mon-Thu; 00:00 needed 12 on Wednesday and Thursday, 2 before
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, 12 if d >= 2 and s == 0 else 2)
    p = predict(h, FC, MON + 3 * DAY + DAY - 300, 600)  # Thursday 23:55, 10 minutes ahead
    assert p.replicas == 12, p.note


def test_a_slot_that_needed_none_predicts_none() -> None:
    """0 is an observation (the service idled), not a gap (-1): it predicts 0, both from the
    same weekday a week before and from the last days."""
    h: History | None = None
    for d in range(7):  # the Monday needed nothing, the other days 6
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, 0 if d == 0 else 6)
    p = predict(h, FC, MON + 7 * DAY + 12 * 3600, 0)
    assert p.replicas == 0 and "the same weekday of past weeks" in p.note
    p = predict(days_of([0] * 24, 3), FC, MON + 3 * DAY + 12 * 3600, 0)
    assert p.replicas == 0 and "the last 3 weekdays" in p.note


def test_prediction_is_the_median_day_not_the_peak_of_peaks() -> None:
    # Three days whose 10:00 slot needed 4, 12 and 6: the median (6), not the peak (12).
    h: History | None = None
    for d, need in enumerate((4, 12, 6)):
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, need if s == 60 else 2)
    assert h is not None
    p = predict(h, FC, MON + 3 * DAY + 10 * 3600, 0)
    assert p.replicas == 6


def test_of_two_days_the_forecast_asks_what_both_needed() -> None:
    # 10:00 needed 12 on one day and 4 on the other: a majority (both) needed 4.
    h: History | None = None
    for d, need in enumerate((12, 4)):
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, need if s == 60 else 2)
    assert h is not None
    assert predict(h, FC, MON + 2 * DAY + 10 * 3600, 0).replicas == 4


def test_a_busier_day_keeps_the_forecast_as_a_floor() -> None:
    h = days_of(RAMP, 3)
    today = MON + 3 * DAY
    for s in range(8 * 6, 11 * 6):  # 08:00-11:00 twice as busy as the history
        h = record(h, FC, today + s * 600, 2 * RAMP[s // 6])
    p = predict(h, FC, today + 11 * 3600, 1800)
    assert p.replicas == 12 and "days of history" in p.note


def test_a_somewhat_quieter_day_scales_the_forecast_to_its_level() -> None:
    """A day at 80 % of the history's level (fits: 20 % < maxErrorFraction 35 %) gets the
    history's shape at today's level: the ramp to 12 is predicted as 10, not 12. Before,
    the forecast held the other days' level all day (on ServeGen, where days differ, 2-3
    replicas above anything today needed)."""
    h: History | None = None
    for d in range(3):  # 10 until 11:00, 12 after
        for s in range(144):
            h = record(h, FC, MON + d * DAY + s * 600, 10 if s < 66 else 12)
    today = MON + 3 * DAY
    for s in range(8 * 6, 11 * 6):  # 08:00-11:00: 8 where the history needed 10
        h = record(h, FC, today + s * 600, 8)
    assert h is not None
    p = predict(h, FC, today + 11 * 3600, 1800)
    assert p.replicas == 10 and "scaled to today's level (80% of the history)" in p.note


def test_changed_slot_length_starts_over() -> None:
    h = days_of(RAMP, 2)
    fc = Forecast(enabled=True, slotSeconds=300)
    h2 = record(h, fc, MON + 2 * DAY, 3)
    assert h2.slot_s == 300 and len(h2.days) == 1


# --- the research limit ----------------------------------------------------------------


def cfg(pretrain_max_jobs: int = 32) -> Any:
    return parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 64}},
            "inference": [
                {"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["h:1"]}},
            ],
            "research": [
                {
                    "name": "pretrain",
                    "gpusPerJob": 8,
                    "maxJobs": pretrain_max_jobs,
                    "priority": 2,
                    "checkpointIntervalSeconds": 1800,
                },
                {
                    "name": "finetune",
                    "gpusPerJob": 4,
                    "priority": 1,
                    "checkpointIntervalSeconds": 1200,
                },
                {"name": "eval", "gpusPerJob": 1, "checkpointIntervalSeconds": 0},
            ],
        }
    )


def decision(desired: int) -> ServiceDecision:
    return ServiceDecision(
        "chat", "default", desired, desired, desired, 0, "", fresh=True, gpus_per_replica=4
    )


WITHHOLD = {
    # withhold per class -> expected slots per class, GPUs withheld
    "none": ({}, {"pretrain": 4, "finetune": 0, "eval": 0}, 0),
    "long-class-limited": (
        {"pretrain": 16, "finetune": 0},
        {"pretrain": 2, "finetune": 0, "eval": 0},
        16,
    ),
    "short-class-limit-covers-longer": (
        # finetune's limit (32 GPUs) covers pretrain's Jobs too: 4 x 8 = 32 fits, finetune 0
        {"pretrain": 0, "finetune": 16},
        {"pretrain": 4, "finetune": 0, "eval": 0},
        0,
    ),
    "all-headroom-needed": (
        {"pretrain": 40, "finetune": 40},
        {"pretrain": 0, "finetune": 0, "eval": 0},
        32,
    ),
}


@pytest.mark.parametrize(("withhold", "slots", "withheld"), WITHHOLD.values(), ids=WITHHOLD.keys())
def test_withhold_only_lowers_research(
    withhold: dict[str, int], slots: dict[str, int], withheld: int
) -> None:
    c = cfg()
    # 64 GPUs, 8 replicas x 4 = 32 held: 32 headroom; pretrain (priority 2) takes it all.
    pool, research = split_pool(
        c, {"chat": decision(8)}, Capacity(64), 0, ready_for_research=True, withhold=withhold
    )
    assert {k: v.slots for k, v in research.items()} == slots
    assert pool.forecast_withheld_gpus == withheld
    assert pool.inference_gpus == 32  # the forecast never takes GPUs from inference
    if withheld:
        assert "forecast withholds" in research["pretrain"].reason


def test_a_shorter_class_limit_counts_the_longer_classes_jobs() -> None:
    """pretrain (1800 s) may hold 2 Jobs = 16 GPUs; finetune's limit (1200 s) leaves 32 − 24 = 8
    GPUs lendable for both together: pretrain's 16 already exceed it, so finetune gets none."""
    c = cfg(pretrain_max_jobs=2)
    pool, research = split_pool(
        c,
        {"chat": decision(8)},
        Capacity(64),
        0,
        ready_for_research=True,
        withhold={"finetune": 24},
    )
    assert {k: v.slots for k, v in research.items()} == {"pretrain": 2, "finetune": 0, "eval": 0}
    assert pool.forecast_withheld_gpus == 16  # finetune's 4 Jobs x 4 GPUs
    assert "inference needs 24 more GPU(s) within its 1200 s" in research["finetune"].reason


RECENT = {
    # (slot offset from now's slot -> need), span -> recent peak
    "nothing-observed": ({}, 1800.0, None),
    "current-slot-only": ({0: 5}, 0.0, 5),
    "a-burst-20-min-ago-within-30": ({0: 3, -2: 9}, 1800.0, 9),
    "a-burst-40-min-ago-is-history": ({0: 3, -4: 9}, 1800.0, 3),
    "across-midnight": ({0: 3, -1: 7}, 600.0, 7),
}


@pytest.mark.parametrize(("needs", "span", "want"), RECENT.values(), ids=RECENT.keys())
def test_recent_peak_is_the_persistence_forecast(
    needs: dict[int, int], span: float, want: int | None
) -> None:
    from scaler.core.forecast import recent_peak

    now = MON + DAY + 5.0  # just after midnight: slot -1 is yesterday's last
    h: History | None = None
    for off, need in sorted(needs.items()):  # (in time order, as the scaler records)
        h = record(h, FC, now + off * 600, need)
    assert recent_peak(h, now, span) == want


def test_research_gate_holds_back_gpus_a_recent_burst_used() -> None:
    """No usable history (one day too short): the persistence forecast still keeps a class
    from starting Jobs on GPUs inference needed within its checkpoint interval."""
    from scaler.core.cycle import _withhold

    c = cfg()
    now = MON + 12 * 3600
    h = record(None, FC, now - 1200, 12)  # 20 min ago: 12 replicas
    h = record(h, FC, now, 8)  # now: 8
    assert predict(h, c.pool.forecast, now, 1800).replicas is None  # (history too short)
    c = c.model_copy(update={"pool": c.pool.model_copy(update={"forecast": FC})})
    got = _withhold(c, {"chat": decision(8)}, {"chat": h}, {"chat": FC}, now)
    # pretrain (30 min): the 12 of 20 min ago -> 4 replicas x 4 GPUs held back; finetune
    # (20 min): the same slot is still inside its span; eval (no interval): no gate.
    assert got == {"pretrain": 16, "finetune": 16}
    assert _withhold(c, {"chat": decision(8)}, {"chat": h}, {"chat": FC}, now + 2400) == {
        "pretrain": 0,
        "finetune": 0,
    }
    # A peak of 9 over 8 held is within minAboveLoadFraction (0.3 of 8 -> 3): the load's
    # own noise, nothing withheld (on the conversation week withholding for such blips cost
    # 180 GPU-hours of research); 11 counts.
    for peak, gpus in ((9, 0), (10, 0), (11, 12)):
        h2 = record(record(None, FC, now - 1200, peak), FC, now, 8)
        got = _withhold(c, {"chat": decision(8)}, {"chat": h2}, {"chat": FC}, now)
        assert got == {"pretrain": gpus, "finetune": gpus}, peak
    # A peak above maxReplicas: inference can take back no more than maxReplicas.
    top = c.inference[0].maxReplicas
    h3 = record(record(None, FC, now - 1200, top + 50), FC, now, 8)
    got = _withhold(c, {"chat": decision(8)}, {"chat": h3}, {"chat": FC}, now)
    assert got == {"pretrain": (top - 8) * 4, "finetune": (top - 8) * 4}
    # No wall clock this cycle (the calendar unknown): no day to read, nothing withheld.
    assert _withhold(c, {"chat": decision(8)}, {"chat": h}, {"chat": FC}, None) == {}


def test_a_service_can_opt_out_of_the_pools_forecast() -> None:
    """Two services with the same daily load, one with `forecast: false`: it is decided
    reactively (no forecast signal, explain says why) and keeps no history; the other gets
    the forecast. Research is gated only by the history that exists."""
    svc = {"gpusPerReplica": 4, "targets": {"static": ["h:1"]}, "coldStartSeconds": 120}
    c = parse_config(
        {
            "pool": {
                "name": "p",
                "capacity": {"gpus": 64},
                "forecast": {"enabled": True, "minHistoryDays": 0.25},
            },
            "inference": [{"name": "chat", **svc}, {"name": "batch", "forecast": False, **svc}],
        }
    )

    def targets(i: int) -> list[TargetState]:
        waiting = 40.0 * math.sin(math.pi * (i % 1440) / 1440) ** 2  # a daily hump
        s = EngineSample(waiting, 20.0, 0.3, 0.3, 1e3 * i, 1e3 * i, 0.0, 1.0)
        return [TargetState(f"r{k}", TargetPhase.SERVING, s, 60.0 * i) for k in range(2)]

    state = CycleState()
    seen: dict[str, set[str]] = {"chat": set(), "batch": set()}
    notes: dict[str, set[str]] = {"chat": set(), "batch": set()}
    for i in range(0, 1440 + 600, 2):  # a day and 10 hours, a cycle every 2 minutes
        t = targets(i)
        inp = CycleInput(c, {"chat": t, "batch": t}, Capacity(64), 60.0 * i, calendar=MON + 60 * i)
        d, state = step(inp, state)
        assert d.seq == i // 2 + 1  # each cycle's decision is newer (StreamIsActive waits on it)
        for name, sd in d.services.items():
            seen[name] |= {v.signal for v in sd.signals}
            notes[name].add(sd.forecast_note)
    assert "forecast" in seen["chat"] and "forecast" not in seen["batch"]
    assert notes["batch"] == {"off for this service (forecast: false): reactive only"}
    assert not any("off for this service" in n for n in notes["chat"])
    assert set(state.forecast) == {"chat"}


def test_replicas_the_forecast_added_are_not_recorded_as_need() -> None:
    """The history records what the load needs, not the count the forecast raised: a queue
    in the hold zone of 12 forecast-held replicas keeps 12 (the queue signal never shrinks
    inside its band), but 36 waiting need 36 / 5 -> 8. Recording 12 fed the forecast's own
    replicas back as tomorrow's need, a ratchet day over day."""
    c = parse_config(
        {
            "pool": {
                "name": "p",
                "capacity": {"gpus": 64},
                "forecast": {"enabled": True, "minHistoryDays": 1},
            },
            "inference": [
                {
                    "name": "chat",
                    "gpusPerReplica": 4,
                    "targets": {"static": ["h:1"]},
                    "maxReplicas": 16,
                },
            ],
        }
    )
    fc = c.pool.forecast
    h = days_of([12] * 24, 1, fc)  # yesterday needed 12 all day
    now = MON + DAY + 3600.0
    s = EngineSample(3.0, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)  # 3 waiting on each of 12
    t = [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(12)]
    d, state = step(
        CycleInput(c, {"chat": t}, Capacity(64), now, calendar=now),
        CycleState(forecast={"chat": h}),
    )
    verdicts = {v.signal: v for v in d.services["chat"].signals}
    assert verdicts["forecast"].replicas == 12 and d.services["chat"].desired == 12
    assert verdicts["queue"].replicas == 12  # the hold zone keeps the count ...
    day, slot = int(now // DAY), int((now % DAY) // fc.slotSeconds)
    assert state.forecast["chat"].days[day][slot] == 8  # ... the load needs 8


def reserve_pool(
    gpus: int,
    adaptive: dict[str, Any],
    fc: dict[str, Any],
    svc: dict[str, Any],
    research: list[dict[str, Any]] | None = None,
) -> Any:
    """A pool of `gpus` with a 4-GPU reserve, the adaptive reserve on (and `adaptive`), the
    forecast settings `fc` and one service, `chat` (4 GPUs per replica, and `svc`)."""
    return parse_config(
        {
            "pool": {
                "name": "p",
                "capacity": {"gpus": gpus},
                "reserveGPUs": 4,
                "adaptiveReserve": {"enabled": True, **adaptive},
                "forecast": fc,
            },
            "inference": [
                {"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["h:1"]}, **svc}
            ],
            **({"research": research} if research else {}),
        }
    )


def forecast_pool(fc: dict[str, Any] | None = None, **svc: Any) -> Any:
    """A 64-GPU pool with the forecast on (and `fc`) and one service, `chat` (4 GPUs, max
    16)."""
    chat = {"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["h:1"]}}
    forecast = {"enabled": True, **(fc or {})}
    return parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 64}, "forecast": forecast},
            "inference": [{**chat, "maxReplicas": 16, **svc}],
        }
    )


@pytest.mark.parametrize(
    ("pool_zone", "calendar", "zone", "weekday_recorded"),
    [
        pytest.param("UTC", None, "UTC", 5, id="the-pools-utc"),
        pytest.param("Asia/Tokyo", None, "Asia/Tokyo", 5, id="the-pools-zone"),
        pytest.param(
            "UTC", {"timeZone": "America/New_York"}, "America/New_York", 4, id="the-services-own"
        ),
        pytest.param("Asia/Tokyo", {"weekendDays": ["Friday"]}, "Asia/Tokyo", 5, id="days-only"),
    ],
)
def test_a_service_keeps_its_history_in_its_own_calendar(
    pool_zone: str, calendar: dict[str, Any] | None, zone: str, weekday_recorded: int
) -> None:
    """`inference[].calendar` overrides the pool's zone (and weekend days) for one service:
    Saturday 03:00 UTC is still Friday evening for a New York service."""
    c = forecast_pool({"timeZone": pool_zone}, calendar=calendar)
    s = EngineSample(3.0, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)
    t = [TargetState(f"r{k}", TargetPhase.SERVING, s, 0.0) for k in range(4)]
    _, state = step(
        CycleInput(c, {"chat": t}, Capacity(64), 0.0, calendar=SAT_0300_UTC), CycleState()
    )
    h = state.forecast["chat"]
    assert h.tz == zone and [weekday(d) for d in h.days] == [weekday_recorded]


def test_a_service_calendar_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"inference\[0\]\.calendar\.timeZone: unknown time zone"):
        forecast_pool(calendar={"timeZone": "Europe/Paris "})
    with pytest.raises(ConfigError, match=r"calendar\.weekendDays.*listed twice"):
        forecast_pool(calendar={"weekendDays": ["Friday", "Friday"]})


@pytest.mark.parametrize(
    ("predicted", "used"),
    [
        pytest.param(11, False, id="one-above-ten-is-the-loads-own-noise"),
        pytest.param(12, False, id="twenty-percent-above-is-still-within"),
        pytest.param(13, True, id="thirty-percent-above-is-used"),
        pytest.param(16, True, id="a-burst-ahead-is-used"),
    ],
)
def test_the_forecast_acts_only_above_what_the_load_asks(predicted: int, used: bool) -> None:
    """The load holds 10 replicas (a queue in the hold zone); a forecast of 11 is within
    minAboveLoadFraction (0.3) of it: not used, explain says so. On smooth traffic such a
    forecast was the previous days' noise held all day."""
    c = forecast_pool()
    h = days_of([predicted] * 24, 2, c.pool.forecast)
    state = CycleState(forecast={"chat": h})
    s = EngineSample(3.0, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)  # 3 waiting on each of 10
    # The first cycle without the calendar (reactive only, the history kept): the load's
    # window is 10.
    for now, cal in ((MON + 2 * DAY + 3600.0, None), (MON + 2 * DAY + 3605.0, "now")):
        t = [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(10)]
        inp = CycleInput(c, {"chat": t}, Capacity(64), now, calendar=now if cal else None)
        d, state = step(inp, state)
    sd = d.services["chat"]
    assert ("forecast" in {v.signal for v in sd.signals}) is used
    assert sd.desired == (predicted if used else 10)
    if not used:
        assert f"{predicted} is within the load's own 30% of 10 (not used)" in sd.forecast_note


def test_a_forecast_within_the_fraction_still_holds_what_it_raised() -> None:
    """The forecast (14) raised the target over a load asking 10. The predicted burst
    arrives: the load asks 12, and 14 is now within 20 % of it, too little to raise. It
    still holds the 14 it raised; it no longer counted, the load's low time (11 minutes)
    let the target step down mid-burst (ServeGen seed 7: 99.62 % against 99.90 %)."""
    # smoothingSeconds 0: the window keeps the burst's ask from its first cycle.
    c = forecast_pool(
        scaleDown={"stabilizationSeconds": 600, "maxStepReplicas": 2, "smoothingSeconds": 0}
    )
    # Past days needed 6 until 01:00 (today too: it fits), 14 after.
    state = CycleState(forecast={"chat": days_of([6] + [14] * 23, 2, c.pool.forecast)})
    t0 = MON + 2 * DAY + 3000.0  # 00:50

    def cycle(now: float, waiting: float, calendar: bool = True) -> ServiceDecision:
        nonlocal state
        s = EngineSample(waiting, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)
        t = [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(10)]
        inp = CycleInput(c, {"chat": t}, Capacity(64), now, calendar=now if calendar else None)
        d, state = step(inp, state)
        return d.services["chat"]

    assert cycle(t0, 3.0, calendar=False).desired == 10  # the load asks 10 (hold zone)
    for i in range(1, 12):  # 11 minutes: the forecast holds 14, the load still asks 10
        assert cycle(t0 + 60 * i, 3.0).desired == 14
    cycle(t0 + 720, 6.0)  # 60 waiting on 10: the load asks 12 ...
    burst = cycle(t0 + 780, 6.0)  # ... and the next cycle compares 14 with it
    assert {v.signal: v.replicas for v in burst.signals}["queue"] == 12
    assert burst.desired == 14, burst.reason
    assert "holds 14" in burst.forecast_note


@pytest.mark.parametrize(
    ("history", "reserve_after_raise", "reserve_after_load"),
    [
        # The forecast raised 10 -> 16 ahead; the load then needs 16: nothing rose beyond
        # what was held, the reserve stays at its floor (it held 24 GPUs more before).
        pytest.param([16] * 24, 4, 4, id="raised-ahead-keeps-no-reserve"),
        # No forecast (history within the load's noise): the load's rise 10 -> 16 is a ramp
        # the held replicas did not cover, the reserve keeps its 24 GPUs free.
        pytest.param([10] * 24, 4, 4 + 24, id="a-reactive-rise-keeps-the-reserve"),
    ],
)
def test_the_adaptive_reserve_counts_only_rises_the_held_replicas_did_not_cover(
    history: list[int], reserve_after_raise: int, reserve_after_load: int
) -> None:
    c = reserve_pool(
        128,
        {"maxGPUs": 32, "leadTimeSeconds": 900},
        {"enabled": True},
        # the load's need is its instantaneous ask (no moving average)
        {"maxReplicas": 32, "scaleDown": {"smoothingSeconds": 0}},
    )
    state = CycleState(forecast={"chat": days_of(history, 2, c.pool.forecast)})
    t0 = MON + 2 * DAY + 3600.0

    def cycle(now: float, waiting: float, calendar: bool = True) -> Any:
        nonlocal state
        s = EngineSample(waiting, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)
        t = [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(10)]
        inp = CycleInput(c, {"chat": t}, Capacity(128), now, calendar=now if calendar else None)
        d, state = step(inp, state)
        return d

    assert cycle(t0, 3.0, calendar=False).services["chat"].desired == 10  # hold zone
    d = cycle(t0 + 60, 3.0)
    assert d.pool.reserve_gpus == reserve_after_raise
    d = cycle(t0 + 120, 8.0)  # 80 waiting on 10 replicas: the load needs 16
    assert d.services["chat"].desired == 16
    assert d.pool.reserve_gpus == reserve_after_load


# typical swing of the rate (None: averages younger than WARM_S), minRateSwing, used
SWINGS = {
    "smooth-rate-reactive-follows": (0.03, 0.1, False),
    "bursty-rate-forecast-raises": (0.25, 0.1, True),
    "swing-not-known-yet-forecast-raises": (None, 0.1, True),
    "min-rate-swing-0-every-service": (0.03, 0.0, True),
}


@pytest.mark.parametrize(("swing", "min_swing", "used"), SWINGS.values(), ids=SWINGS.keys())
def test_the_forecast_raises_only_for_a_rate_that_swings(
    swing: float | None, min_swing: float, used: bool
) -> None:
    """A forecast of 16 over a load asking 10: used unless the service's request rate is
    known to be smooth (`core.ramp`'s typical swing below pool.forecast.minRateSwing); then
    explain says why, and research is still withheld for it. Where it is used for a rate
    known to swing, the ramp signal stands aside."""
    c = forecast_pool({"minRateSwing": min_swing}, slo={"ttftSeconds": 2})
    h = days_of([16] * 24, 2, c.pool.forecast)
    state = CycleState(forecast={"chat": h})
    s = EngineSample(3.0, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)  # 3 waiting on each of 10
    start = MON + 2 * DAY + 3600.0
    age = WARM_S + 60 if swing is not None else WARM_S - 60
    rate_swing = RateSwing(start - age, start, swing or 0.0, 1.0)
    for now, cal in ((start, None), (start + 5.0, "now")):
        if now > start:  # the rate's history, as `decide` keeps it for a service with slo:
            pol = state.policy["chat"]
            state = replace(state, policy={"chat": replace(pol, rate_swing=rate_swing)})
        t = [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(10)]
        inp = CycleInput(c, {"chat": t}, Capacity(64), now, calendar=now if cal else None)
        d, state = step(inp, state)
    sd = d.services["chat"]
    assert ("forecast" in {v.signal for v in sd.signals}) is used
    assert sd.desired == (16 if used else 10)
    if not used:
        assert "the request rate is smooth (typical swing 0.030 < minRateSwing 0.1)" in (
            sd.forecast_note
        )
    # The ramp signal stands aside where the forecast covers a rate known to swing.
    aside = "the ramp signal stands aside: the forecast covers a rate that swings"
    assert (aside in sd.forecast_note) is (used and swing is not None)


@pytest.mark.parametrize(
    ("swing", "short", "long", "since_rate", "rising", "beyond_cold_start"),
    [
        pytest.param(0.03, 12.0, 10.0, 0.0, True, 600.0, id="smooth-and-rising"),
        pytest.param(0.03, 10.0, 12.0, 0.0, False, 600.0, id="smooth-and-falling"),
        pytest.param(0.03, 10.0, 10.0, 0.0, False, 600.0, id="smooth-and-level"),
        pytest.param(0.5, 12.0, 10.0, 0.0, False, 600.0, id="bursty-rises-at-every-burst"),
        pytest.param(None, 12.0, 10.0, 0.0, False, 600.0, id="swing-not-known-yet"),
        pytest.param(0.03, None, None, 0.0, False, 600.0, id="no-rate-yet"),
        pytest.param(0.03, 12.0, 10.0, GAP_S, True, 600.0, id="rate-measured-a-gap-ago"),
        pytest.param(0.03, 12.0, 10.0, GAP_S + 1.0, False, 600.0, id="no-rate-measured-lately"),
        # give-back relative to the service's cold start (in seconds beyond it)
        pytest.param(0.03, 12.0, 10.0, 0.0, False, 0.0, id="research-leaves-within-a-cold-start"),
        pytest.param(0.03, 12.0, 10.0, 0.0, True, 1.0, id="research-leaves-after-a-cold-start"),
    ],
)
def test_the_reserve_holds_only_for_a_smooth_rate_that_rises(
    swing: float | None,
    short: float | None,
    long: float | None,
    since_rate: float,
    rising: bool,
    beyond_cold_start: float,
) -> None:
    """core.cycle tells the adaptive reserve to hold (core.reserve) while a service's rate
    is smooth (typical swing below minRateSwing) and its 5-min average is above its 20-min
    one; a bursty rate's averages cross at every burst and never hold it, and averages
    no measured rate has moved for longer than ramp.GAP_S (a quiet night) say nothing.
    Research that gives GPUs back within a replica's cold start holds nothing."""
    from scaler.core.cycle import _smooth_and_rising, _smooth_rate

    c = forecast_pool({"minRateSwing": 0.1}, slo={"ttftSeconds": 2})
    t0 = MON + 3 * DAY  # the last measured rate folded in
    age = WARM_S + 60 if swing is not None else WARM_S - 60
    pol = PolicyState(
        10,
        t0,
        trend=None if short is None or long is None else RateTrend(t0, short, long),
        rate_swing=RateSwing(t0 - age, t0, swing or 0.0, 1.0),
    )
    now = t0 + since_rate
    give_back = c.inference[0].coldStartSeconds + beyond_cold_start
    # What the cycle read as smooth (it sets the forecast aside on the same reading).
    smooth = ["chat"] if _smooth_rate(swing, c.pool.forecast) is not None else []
    assert _smooth_and_rising(c, smooth, {"chat": pol}, now, give_back) == (
        ["chat"] if rising else []
    )
    assert _smooth_and_rising(c, smooth, {}, now, give_back) == []  # no state: nothing to hold


def _an_hour_after_a_rise() -> tuple[Config, ReserveTracker, float]:
    """A 64-GPU pool with one smooth-rate service (`chat`, 4 GPUs a replica) and 1-GPU eval
    research; its reserve tracker saw a 12-GPU rise at 100 s (the reserve then: 4 + 12),
    and `now` is 3800 s, when that rise has left the one-hour window."""
    c = reserve_pool(
        64,
        {"leadTimeSeconds": 300, "maxGPUs": 16},
        {"minRateSwing": 0.1},
        {"maxReplicas": 16, "slo": {"ttftSeconds": 2}},
        research=[{"name": "eval", "gpusPerJob": 1, "maxJobs": 64}],
    )
    tracker = ReserveTracker(c.pool)
    tracker.observe(0.0, 8)
    tracker.observe(100.0, 20)
    assert tracker.reserve(100.0).gpus == 4 + 12
    return c, tracker, 3800.0


@pytest.mark.parametrize(
    ("short", "held"), [pytest.param(12.0, 12, id="rising"), pytest.param(8.0, 0, id="falling")]
)
def test_a_cycle_keeps_the_reserve_while_a_smooth_rate_rises(short: float, held: int) -> None:
    """Through core.cycle.step: an hour after a 12-GPU rise left the reserve's window, a
    smooth service whose rate is rising keeps those 12 GPUs free (research is lent 12 fewer)
    and the split says why; with its rate falling the reserve falls to the floor."""
    c, tracker, now = _an_hour_after_a_rise()
    pol = PolicyState(
        2,
        now - 5.0,
        trend=RateTrend(now - 5.0, short, 10.0),
        rate_swing=RateSwing(now - WARM_S - 60, now - 5.0, 0.03, 1.0),
    )
    state = CycleState(policy={"chat": pol}, reserve=tracker)
    s = EngineSample(0.0, 1.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)
    t = [TargetState(f"r{k}", TargetPhase.SERVING, s, now) for k in range(2)]
    d, _ = step(CycleInput(c, {"chat": t}, Capacity(64), now), state)
    assert d.pool is not None
    assert d.pool.reserve_gpus == 4 + held
    assert d.pool.reserve_held_gpus == held
    assert d.pool.reserve_held_for == (("chat",) if held else ())
    assert d.pool.headroom_gpus == 64 - d.pool.inference_gpus - 4 - held


# (previous typical swing, the averages the cycle starts from (short, long), first tokens
# per target this 5-s cycle (two targets; 100 in all is the objective's minRequests), the
# reserve's hold). The previous reading carries almost no weight, so this one cycle moves
# the swing across minRateSwing 0.1 either way.
SWING_CROSSES = {
    "was-smooth-now-swings-still-holds": (0.0999, (12.0, 10.0), 100.0, 12),
    "swung-now-smooth-does-not-hold-yet": (0.1001, (10.5, 10.0), 50.0, 0),
}


@pytest.mark.parametrize(
    ("swing", "averages", "per_target", "held"),
    SWING_CROSSES.values(),
    ids=SWING_CROSSES.keys(),
)
def test_the_reserve_hold_reads_the_swing_the_cycle_starts_from(
    swing: float, averages: tuple[float, float], per_target: float, held: int
) -> None:
    """The reserve's hold reads whether a rate is smooth from the swing the cycle starts
    from (02821b7: the reading that also sets the forecast aside, so the two never
    disagree), not from the one the cycle has just updated. Here the cycle's own rate moves
    the swing across minRateSwing, and the hold follows the reading before it."""
    c, tracker, now = _an_hour_after_a_rise()
    weight = 1e-6  # next to one 5-s cycle's 5.8e-5 of a day-long average
    pol = PolicyState(
        2,
        now - 5.0,
        trend=RateTrend(now - 5.0, *averages),
        rate_swing=RateSwing(now - WARM_S - 60, now - 5.0, swing * weight, weight),
    )
    state = CycleState(policy={"chat": pol}, reserve=tracker)
    s = EngineSample(0.0, 1.0, 0.1, 0.1, 0.0, 0.0, 0.0, 1.0)
    met = hist(per_target, per_target, per_target, per_target, per_target)  # all within 2 s
    t = [
        TargetState(f"r{k}", TargetPhase.SERVING, s, now, ttft_delta=met, delta_s=5.0)
        for k in range(2)
    ]
    d, after = step(CycleInput(c, {"chat": t}, Capacity(64), now), state)
    # The cycle measured its objective and moved the swing across the line ...
    new = after.policy["chat"].rate_swing
    assert new is not None and new.typical is not None
    assert (new.typical < 0.1) == (swing >= 0.1)
    trend = after.policy["chat"].trend
    assert trend is not None and trend.short > trend.long  # ... while the rate still rises
    # ... and the hold read the swing the cycle started from.
    assert d.pool is not None
    assert d.pool.reserve_held_gpus == held
    assert d.pool.reserve_held_for == (("chat",) if held else ())
