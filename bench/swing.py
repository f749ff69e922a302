"""How much a scenario's request rate swings, as the scaler measures it (docs/bench.md,
"The forecast and the ramp signal by how the rate swings"; `pool.forecast.minRateSwing`).

    python -m bench.swing [the scenario flags of bench.simulate: --trace, --days, --seed,
                           --shuffle-days, ...]

Feeds the scenario's requests, counted over the slo window (300 s) at the scrape interval,
through `core.ramp`'s averages and typical swing, and prints the least, median and most
typical swing after the lead-in (an approximation of what the policy sees: it reads the
rate of first tokens served, and only on cycles whose window measured the objective).
"""

from __future__ import annotations

import sys

import numpy as np

from bench.simulate import parse_args
from scaler.core import ramp
from scaler.sim.scenario import scenario_workload
from scaler.sim.workload import DAY, Workload

WINDOW_S = 300.0  # the slo signal's default window: the rate it hands the ramp signal


def typical_swings(w: Workload, t0: float, t1: float, dt: float) -> np.ndarray:
    """The typical swing at each cycle of [t0 + WINDOW_S, t1), NaN until it is known."""
    ts = np.arange(t0 + WINDOW_S, t1, dt)
    lo, hi = np.searchsorted(w.arrival, ts - WINDOW_S), np.searchsorted(w.arrival, ts)
    rps = (hi - lo) / WINDOW_S
    trend, swing = None, None
    out = np.full(ts.size, np.nan)
    for k, (t, r) in enumerate(zip(ts.tolist(), rps.tolist(), strict=True)):
        trend = ramp.observe(trend, r, t)
        swing = ramp.swing(swing, trend, t)
        if swing is not None and swing.typical is not None:
            out[k] = swing.typical
    return out


def main(argv: list[str] | None = None) -> int:
    scn, _ = parse_args(argv)
    curve, _, _, w = scenario_workload(scn)
    s = typical_swings(w, -scn.warmup_s, scn.days * DAY, scn.timing.scrape_interval_s)
    s = s[~np.isnan(s)]
    if s.size == 0:
        print("error: too short to know the swing (needs an hour of rates)", file=sys.stderr)
        return 2
    print(
        f"{curve.name}, seed {scn.seed}: typical swing least {s.min():.3f}, "
        f"median {np.median(s):.3f}, most {s.max():.3f} over {s.size} cycles"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
