"""Time-weighted exponential moving averages, shared by the signals that smooth a reading."""

from __future__ import annotations

import math


def ewma(prev: float, value: float, dt: float, tau: float) -> float:
    """`prev` moved toward `value` after `dt` seconds, time constant `tau` seconds. Weighted
    by the time since the last sample, so the average does not depend on the cycle length."""
    return prev + (1.0 - math.exp(-dt / tau)) * (value - prev)
