"""Properties of the forecast history (scaler/core/forecast.py) over arbitrary instants,
needs and time zones (daylight-saving, half- and quarter-hour offsets, the date line):
bounded, keyed by the zone's dates, and never predicting more than a day needed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scaler.config import Forecast
from scaler.core.forecast import DAY, History, local_seconds, predict, recent_peak, record
from tests.support.fuzz import budget

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # a 30-min daylight-saving shift
    "Asia/Kathmandu",  # +05:45
    "Pacific/Kiritimati",  # +14:00
    "Pacific/Pago_Pago",  # -11:00
]
T0 = 1_704_067_200.0  # 2024-01-01 00:00 UTC; a year of instants covers both DST changes


@budget(200)
@given(
    st.sampled_from(ZONES),
    st.sampled_from([1800.0, 3600.0]),
    st.integers(1, 10),
    st.floats(0, 365 * DAY),
    st.integers(1, 9),
    st.lists(st.integers(0, 64), min_size=24, max_size=24),
    st.floats(0, DAY),
    st.floats(0, 2 * DAY),
)
def test_history_is_bounded_and_predicts_no_more_than_was_needed(
    zone: str,
    slot: float,
    keep: int,
    start: float,
    days: int,
    hourly: list[int],
    before_end: float,
    horizon: float,
) -> None:
    """`days` of an hourly pattern recorded every slot from any instant of a year; asked
    within the last day of it."""
    fc = Forecast(
        enabled=True, slotSeconds=slot, historyDays=keep, minHistoryDays=0.25, timeZone=zone
    )
    h: History | None = None
    t0 = T0 + start
    for k in range(round(days * DAY / slot)):
        t, need = t0 + k * slot, hourly[int(k * slot // 3600) % 24]
        h = record(h, fc, t, need)
        local = local_seconds(zone, t)
        day = int(local // DAY)
        assert h.days[day][int((local - day * DAY) // slot)] >= need
    assert h is not None and h.tz == zone
    assert len(h.days) <= keep and max(h.days) - min(h.days) < keep
    assert all(len(row) == round(DAY / slot) for row in h.days.values())
    most = max(max(row) for row in h.days.values())
    now = t0 + days * DAY - before_end
    p = predict(h, fc, now, horizon)
    assert p.replicas is None or 0 <= p.replicas <= most, p.note
    peak = recent_peak(h, now, horizon)
    assert peak is None or 0 <= peak <= most
