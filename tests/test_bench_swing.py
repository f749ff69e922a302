"""bench.swing: the typical swing of a scenario's request rate, as `core.ramp` measures it
(docs/bench.md, "The forecast and the ramp signal by how the rate swings")."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from bench.swing import typical_swings
from scaler.core.ramp import WARM_S
from scaler.sim.workload import Workload

HOURS = 4


def workload(rate_at: Callable[[float], float]) -> Workload:
    """Poisson arrivals at `rate_at(t)` requests/s, drawn per second (seeded)."""
    rng = np.random.default_rng(7)
    seconds = np.arange(0.0, HOURS * 3600.0)
    rate = np.array([rate_at(t) for t in seconds])
    counts = rng.poisson(rate)
    arrival = np.sort(np.repeat(seconds, counts) + rng.random(int(counts.sum())))
    n = arrival.size
    ones = np.ones(n, dtype=np.int64)
    return Workload(arrival, ones, ones, seconds, rate)


def test_a_bursty_rate_reads_a_larger_swing_and_only_after_an_hour() -> None:
    smooth = workload(lambda t: 20.0 * (1.5 + math.sin(2 * math.pi * t / 86400)))
    bursty = workload(lambda t: 20.0 * (4.0 if (t // 240) % 3 == 0 else 1.0))
    calm = typical_swings(smooth, 0.0, HOURS * 3600.0, 5.0)
    rough = typical_swings(bursty, 0.0, HOURS * 3600.0, 5.0)
    # Unknown for the first hour of rates (the first comes after one 300-s window).
    known = np.arange(300.0, HOURS * 3600.0, 5.0) >= 300.0 + WARM_S
    assert np.isnan(calm[~known]).all() and not np.isnan(calm[known]).any()
    assert np.nanmedian(calm) < 0.1 < np.nanmedian(rough)
