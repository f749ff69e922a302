"""Cumulative histograms as tuples (core.histogram): deltas between scrapes, resets, totals,
the count within an objective and the bucket that holds it. Pure: tables of named cases."""

from __future__ import annotations

import math

import pytest

from scaler.core import histogram
from scaler.core.histogram import Buckets

INF = math.inf
B: Buckets = ((1.0, 2.0), (2.5, 6.0), (INF, 10.0))

# (previous scrape, this scrape) -> observations in between, or None (never made up).
DELTAS: dict[str, tuple[Buckets | None, Buckets | None, Buckets | None]] = {
    "counts-grew": (B, ((1.0, 3.0), (2.5, 8.0), (INF, 13.0)), ((1.0, 1.0), (2.5, 2.0), (INF, 3.0))),
    "nothing-new": (B, B, ((1.0, 0.0), (2.5, 0.0), (INF, 0.0))),
    "no-previous": (None, B, None),
    "no-current": (B, None, None),
    "a-bucket-more": (B, ((0.5, 1.0), *B), None),
    "other-bounds": (B, ((1.0, 2.0), (5.0, 6.0), (INF, 10.0)), None),
    "a-count-went-down-a-restart": (B, ((1.0, 0.0), (2.5, 1.0), (INF, 1.0)), None),
}


@pytest.mark.parametrize(("prev", "cur", "want"), DELTAS.values(), ids=DELTAS.keys())
def test_delta(prev: Buckets | None, cur: Buckets | None, want: Buckets | None) -> None:
    assert histogram.delta(prev, cur) == want


# (previous, current) -> a counter reset?
RESETS: dict[str, tuple[Buckets | None, Buckets | None, bool]] = {
    "a-count-went-down": (B, ((1.0, 0.0), (2.5, 1.0), (INF, 1.0)), True),
    "only-the-total-went-down": (B, ((1.0, 2.0), (2.5, 6.0), (INF, 9.0)), True),
    "counts-grew": (B, ((1.0, 3.0), (2.5, 8.0), (INF, 13.0)), False),
    "no-previous": (None, B, False),
    "no-current": (B, None, False),
    "a-bucket-more-is-not-a-reset": (B, ((0.5, 0.0), (1.0, 0.0), (2.5, 0.0), (INF, 0.0)), False),
}


@pytest.mark.parametrize(("prev", "cur", "reset"), RESETS.values(), ids=RESETS.keys())
def test_decreased(prev: Buckets | None, cur: Buckets | None, reset: bool) -> None:
    assert histogram.decreased(prev, cur) is reset


def test_total_is_the_inf_bucket() -> None:
    assert histogram.total(B) == 10.0


# x -> observations <= x in B (interpolated inside a bucket) and the bucket holding x.
WITHIN: dict[str, tuple[float, float, tuple[float, float] | None]] = {
    "below-the-first-bound": (0.5, 1.0, (0.0, 1.0)),
    "on-the-first-bound": (1.0, 2.0, None),
    "inside-a-bucket": (2.0, 2.0 + 4.0 * (1.0 / 1.5), (1.0, 2.5)),
    "on-a-bound": (2.5, 6.0, None),
    "past-the-last-finite-bound": (30.0, 6.0, (2.5, INF)),
}


@pytest.mark.parametrize(("x", "count", "bucket"), WITHIN.values(), ids=WITHIN.keys())
def test_within_and_bracket(x: float, count: float, bucket: tuple[float, float] | None) -> None:
    assert histogram.within(B, x) == pytest.approx(count)
    assert histogram.bracket(B, x) == bucket
