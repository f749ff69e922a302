"""Cumulative Prometheus histograms as compact tuples: ((upper bound, cumulative count), ...).

Bounds come from the exposition (vLLM's are configurable: never hard-coded here), sorted
ascending, the last one +Inf. Pure helpers for the SLO signal: per-target deltas between
two scrapes (reset-safe), sums over targets, and the count within an objective.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping

Buckets = tuple[tuple[float, float], ...]


def from_series(per_le: Mapping[float, float]) -> Buckets | None:
    """Cumulative counts by upper bound -> Buckets; None when unusable (no +Inf bucket, a
    count that decreases with the bound: malformed, never trusted)."""
    if not per_le or math.inf not in per_le:
        return None
    out = tuple(sorted(per_le.items()))
    for (_, a), (_, b) in itertools.pairwise(out):
        if b < a:
            return None
    return out


def total(b: Buckets) -> float:
    return b[-1][1]


def delta(prev: Buckets | None, cur: Buckets | None) -> Buckets | None:
    """Observations between two scrapes of one target, per bucket.

    None (no delta, never a made-up or negative count) when either is missing, the bounds
    differ (reconfigured), or any cumulative count went down (the process restarted).
    """
    if prev is None or cur is None or len(prev) != len(cur):
        return None
    out = []
    for (le0, c0), (le1, c1) in zip(prev, cur, strict=True):
        if le0 != le1 or c1 < c0:
            return None
        out.append((le1, c1 - c0))
    return tuple(out)


def decreased(prev: Buckets | None, cur: Buckets | None) -> bool:
    """Any cumulative count lower than before under the same bounds: a counter reset."""
    if prev is None or cur is None or len(prev) != len(cur):
        return False
    return any(le0 == le1 and c1 < c0 for (le0, c0), (le1, c1) in zip(prev, cur, strict=True))


def add(parts: Iterable[Buckets]) -> Buckets | None:
    """Sum of histograms with the same bounds (None if none, or the bounds disagree)."""
    acc: dict[float, float] | None = None
    bounds: tuple[float, ...] | None = None
    for b in parts:
        les = tuple(le for le, _ in b)
        if bounds is None:
            bounds, acc = les, dict.fromkeys(les, 0.0)
        elif les != bounds:
            return None
        assert acc is not None
        for le, c in b:
            acc[le] += c
    if acc is None:
        return None
    return tuple(acc.items())


def within(b: Buckets, x: float) -> float:
    """Observations <= x, interpolating linearly inside the bucket that holds x, as
    Prometheus' histogram_quantile does (observations spread evenly within a bucket).
    Below the first bound the bucket starts at 0 (or at the bound itself when it is <= 0)."""
    lo_le, lo_c = 0.0, 0.0
    for le, c in b:
        if x >= le:
            lo_le, lo_c = le, c
            continue
        if math.isinf(le):
            return lo_c  # beyond the last finite bound nothing can be interpolated
        width = le - lo_le
        frac = (x - lo_le) / width if width > 0 else 1.0
        return lo_c + (c - lo_c) * min(1.0, max(0.0, frac))
    return lo_c


def bracket(b: Buckets, x: float) -> tuple[float, float] | None:
    """The bucket (lower, upper bound) that holds `x` strictly inside; None when `x` is a
    bound (measured exactly). Inside, `within` interpolates: with vLLM's TTFT bounds
    (..., 1.0, 2.5, ...) a 2-s objective is an estimate that can be off by points (the
    requests are rarely spread evenly across a bucket)."""
    lo = 0.0
    for le, _ in b:
        if x == le:
            return None
        if x < le:
            return (lo, le)
        lo = le
    return None
