"""Request arrivals: a diurnal rate curve from a public trace, real token lengths, bursts.

* Rate curve: the trace's per-window mean rate, linearly interpolated, optionally with a
  per-minute modulation drawn inside the trace's low/high band (Azure 2024 curves, which
  were digitised as the min/max of per-minute counts per window).
* Scaling: the curve is multiplied so that its peak over the simulated span equals a given
  request rate (the bench sets it to what ~90 % of the pool serves at the SLO).
* Arrivals inside the curve: renewal processes in operational time (time-change of the
  cumulative rate). Unit-mean gaps are resampled from the real Azure 2023 per-request
  trace of the same service, each gap normalised by its minute's rate, so the bursts are
  the real ones (`burst="empirical"`); a service m times busier than that trace is m
  independent such streams superposed. Or plain Poisson (`burst="poisson"`).
* Lengths: (prompt, output) pairs resampled jointly from the Azure 2023 trace.

Everything is drawn from one `numpy.random.Generator`: same seed, same requests.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from scaler.sim.data import data_file

DAY = 86400.0

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# Mean request rate of the Azure 2023 one-hour traces (traces/README.md).
AZURE2023_MEAN_RPS = {"code": 2.57, "conv": 5.53}


@dataclass(frozen=True, slots=True)
class RateCurve:
    """Mean request rate per window: t (window start, s since trace start) -> req/s."""

    name: str
    t: FloatArray  # window starts, seconds
    rate: FloatArray  # mean req/s in the window
    low: FloatArray | None  # per-minute band (req/s), if the trace has one
    high: FloatArray | None
    window_s: float
    lengths: str  # "code" | "conv": which Azure 2023 trace to draw lengths and gaps from
    # Unix time of t = 0 when the trace's dates are known (the forecast's weekdays); None:
    # unknown (ServeGen publishes day numbers only), a shuffled curve.
    start_unix: float | None = None

    @property
    def span_s(self) -> float:
        return float(self.t[-1] + self.window_s)


def _servegen(column: str, name: str) -> RateCurve:
    path = data_file("traces", "servegen_language_2week_rate.csv")
    t, r = [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            t.append(float(row["t_s"]))
            r.append(float(row[column]))
    rate = np.asarray(r)
    # All-zero windows are data gaps (data/README.md): fill from the neighbours.
    gap = rate <= 0
    if gap.any():
        idx = np.arange(rate.size)
        rate[gap] = np.interp(idx[gap], idx[~gap], rate[~gap])
    return RateCurve(name, np.asarray(t), rate, None, None, 600.0, "conv")


def _servegen_r1() -> RateCurve:
    path = data_file("traces", "servegen_r1_1day_rate.csv")
    t, r = [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            t.append(float(row["t_s"]))
            r.append(float(row["deepseek_r1_rps"]))
    return RateCurve("servegen-r1", np.asarray(t), np.asarray(r), None, None, 600.0, "conv")


# Unix time of each Azure 2024 week's t = 0 (data/README.md): coding Friday 10 May 2024,
# conversation Sunday 12 May 2024, 00:00 UTC.
AZURE_2024_WEEK_START = {"code": 1715299200.0, "conv": 1715472000.0}


def _azure(kind: str) -> RateCurve:
    path = data_file("traces", f"azure2024_{kind}_week_rate.csv")
    t, mid, lo, hi = [], [], [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            t.append(float(row["t_s"]))
            mid.append(float(row["rps_mid"]))
            lo.append(float(row["rps_low"]))
            hi.append(float(row["rps_high"]))
    return RateCurve(
        f"azure-{kind}-week",
        np.asarray(t),
        np.asarray(mid),
        np.asarray(lo),
        np.asarray(hi),
        7.215 * 60.0,
        kind,
        AZURE_2024_WEEK_START[kind],
    )


TRACES: dict[str, Callable[[], RateCurve]] = {
    "azure-code-week": lambda: _azure("code"),
    "azure-conv-week": lambda: _azure("conv"),
    "servegen-large": lambda: _servegen("m_large_rps", "servegen-large"),
    "servegen-mid": lambda: _servegen("m_mid_rps", "servegen-mid"),
    "servegen-small": lambda: _servegen("m_small_rps", "servegen-small"),
    "servegen-r1": _servegen_r1,
}


def shuffle_days(curve: RateCurve, rng: np.random.Generator) -> RateCurve:
    """The curve's whole days in a random order (a control without a daily pattern): the
    curve resampled per minute, cut into days, the days permuted; a partial last day is
    dropped."""
    days = int(curve.span_s // DAY)
    if days < 2:
        raise ValueError(f"{curve.name} spans {curve.span_s / DAY:.2f} days: nothing to shuffle")
    t = np.arange(0.0, days * DAY, 60.0)
    centres = curve.t + curve.window_s / 2
    order = rng.permutation(days)

    def per_minute(x: FloatArray | None) -> FloatArray | None:
        if x is None:
            return None
        return np.asarray(np.interp(t + 30.0, centres, x).reshape(days, -1)[order].ravel())

    rate = per_minute(curve.rate)
    assert rate is not None
    return RateCurve(
        f"{curve.name} (days shuffled: {','.join(map(str, order))})",
        t,
        rate,
        per_minute(curve.low),
        per_minute(curve.high),
        60.0,
        curve.lengths,
    )


def load_curve(name: str) -> RateCurve:
    try:
        return TRACES[name]()
    except KeyError:
        raise ValueError(f"unknown trace {name!r}; known: {', '.join(sorted(TRACES))}") from None


@cache
def azure2023(kind: str) -> tuple[IntArray, IntArray, FloatArray]:
    """(prompt tokens, output tokens, unit-mean gaps normalised per minute) of a 2023 trace."""
    path = data_file("traces", f"azure2023_{kind}_requests.csv")
    ts, p, o = [], [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            ts.append(float(row["t_s"]))
            p.append(int(row["prompt_tokens"]))
            o.append(int(row["output_tokens"]))
    t = np.asarray(ts) - ts[0]
    minute = (t // 60).astype(np.int64)
    per_min = np.bincount(minute).astype(float) / 60.0
    gaps = np.diff(t) * per_min[minute[1:]]
    gaps = gaps[per_min[minute[1:]] > 0]
    gaps = gaps / gaps.mean()
    return np.asarray(p, dtype=np.int64), np.asarray(o, dtype=np.int64), gaps


@dataclass(frozen=True)
class Workload:
    """A fixed, sorted set of requests: arrival time (s), prompt and output tokens."""

    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    rate_t: FloatArray  # the modulated rate curve the arrivals follow (for plots, oracle)
    rate: FloatArray

    def __len__(self) -> int:
        return int(self.arrival.size)

    def arrivals(self, t0: float, t1: float) -> tuple[int, int]:
        """Index range [i, j) of the requests arriving in [t0, t1)."""
        i, j = np.searchsorted(self.arrival, (t0, t1), side="left")
        return int(i), int(j)

    def rate_at(self, t: FloatArray | float) -> FloatArray:
        return np.asarray(np.interp(t, self.rate_t, self.rate), dtype=float)


def lengths(
    kind: str, n: int, rng: np.random.Generator, max_model_len: int
) -> tuple[IntArray, IntArray]:
    p, o, _ = azure2023(kind)
    idx = rng.integers(0, p.size, n)
    prompt = np.clip(p[idx], 1, max_model_len - 1)
    output = np.clip(o[idx], 1, max_model_len - prompt)
    return prompt, output


def make_workload(
    curve: RateCurve,
    *,
    start_s: float,
    duration_s: float,
    peak_rps: float,
    rng: np.random.Generator,
    burst: Literal["empirical", "poisson"] = "empirical",
    max_model_len: int = 8192,
    lead_in_s: float = 0.0,
) -> Workload:
    """Requests over [−lead_in_s, duration_s) (time 0 = `start_s` into the trace)."""
    t_end = duration_s
    t0 = -lead_in_s
    # The lead-in before the trace's first window holds its first rate (np.interp clamps).
    if start_s < 0 or start_s + t_end > curve.t[-1] + 2 * curve.window_s:
        raise ValueError(
            f"{curve.name} spans {curve.span_s / DAY:.2f} days; "
            f"asked for [{start_s / DAY:.2f}, {(start_s + t_end) / DAY:.2f}] days"
        )
    centres = curve.t + curve.window_s / 2 - start_s
    # Scale on the mean curve's peak over the measured span (not the lead-in).
    grid = np.arange(t0, t_end + 60.0, 60.0)
    mean = np.interp(grid, centres, curve.rate)
    in_span = grid >= 0
    scale = peak_rps / float(mean[in_span].max())
    rate = mean * scale
    if curve.low is not None and curve.high is not None:
        # Per-minute rate drawn inside the digitised min/max band of its window.
        lo = np.interp(grid, centres, curve.low) * scale
        hi = np.interp(grid, centres, curve.high) * scale
        rate = lo + (hi - lo) * rng.random(grid.size)
    # Cumulative rate Λ(t) on the minute grid (piecewise constant per minute).
    cum = np.concatenate(([0.0], np.cumsum(rate[:-1] * 60.0)))
    total = cum[-1]
    if burst == "empirical":
        # The scaled service = superposition of m independent copies of the 2023 service's
        # burst process (more users, not bigger bursts); m = mean scaled rate / 2023 rate.
        _, _, gaps = azure2023(curve.lengths)
        base_rps = AZURE2023_MEAN_RPS[curve.lengths]
        m = max(1, round(total / (grid[-1] - grid[0]) / base_rps))
        per = int(total / m * 1.05 + 10 * np.sqrt(total / m) + 50)
        while True:
            u = rng.choice(gaps, (m, per)) * m
            streams = np.cumsum(u, axis=1) - u[:, :1] * rng.random((m, 1))
            if streams[:, -1].min() >= total:
                break
            per *= 2
        ops = np.sort(streams.ravel())
    else:
        ops = np.cumsum(rng.exponential(1.0, int(total * 1.05 + 10 * np.sqrt(total) + 100)))
        while ops[-1] < total:
            ops = np.concatenate((ops, ops[-1] + np.cumsum(rng.exponential(1.0, ops.size))))
    ops = ops[ops < total]
    arrival = np.interp(ops, cum, grid)
    arrival = arrival[arrival < t_end]
    prompt, output = lengths(curve.lengths, arrival.size, rng, max_model_len)
    return Workload(arrival, prompt, output, grid, rate)


def stationary_workload(
    kind: str,
    rps: float,
    duration_s: float,
    rng: np.random.Generator,
    burst: Literal["empirical", "poisson"] = "empirical",
    max_model_len: int = 8192,
) -> Workload:
    """Constant-rate arrivals (same gap and length model): for capacity calibration."""
    grid = np.array([0.0, duration_s])
    curve = RateCurve("flat", grid, np.array([rps, rps]), None, None, duration_s, kind)
    return make_workload(
        curve,
        start_s=0.0,
        duration_s=duration_s,
        peak_rps=rps,
        rng=rng,
        burst=burst,
        max_model_len=max_model_len,
    )
