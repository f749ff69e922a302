"""Reserve: GPUs kept free so inference can grow without first waiting for preemption.

    reserve = pool.reserveGPUs + min(maxGPUs, largest rise over any leadTimeSeconds span in
                                      the last windowSeconds)
    rise ending at t = GPUs the load needed at t − least GPUs inference held in [t − lead, t]

The adaptive part is sized from what actually happened recently: if the load needed up to
12 GPUs more than inference held one model-load lead time before, during the last hour,
keep 12 free (capped), so the next such ramp lands on free GPUs while research pods are
still checkpointing. A rise the held replicas already covered (the forecast raised ahead,
or a scale-down window still held them) needed no new GPUs and keeps none free: measured
on what was held alone, a forecast raise ahead of a ramp counted once more as a ramp to
expect, and the reserve held the same GPUs a second time for an hour (coding week: 84.4 ->
85.8 % of the oracle's harvest, ServeGen 87.0 -> 88.3 %, lost work unchanged).

While a smooth service's rate is rising (`reserve(..., rising=True)`, decided by
core.cycle), the adaptive part does not fall: a rise that leaves the window then is more
often the start of a ramp than noise, and the GPUs it freed were lent to research just
before the ramp needed them (ServeGen seed 1: the reserve fell 20 -> 8 GPUs at 24.7 h as
an hour-old rise left the window, research took them, and the ramp 5 minutes later waited
out the 600-s grace: half the requests of that 10 minutes missed). It falls once the rate
stops rising. core.cycle asks for the hold only where research gives GPUs back slower than
the service's replica loads its model: research that leaves sooner hardly delays a ramp.
A bursty rate's 5-minute average climbs above its 20-minute one at every burst, so only
smooth rates hold (`pool.forecast.minRateSwing`; holding for bursty ones
is untried: the coding week's harvest is its tight bound).
Pure: the caller feeds (time, held GPUs, needed GPUs) samples with its own clock.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from scaler.config import PoolConfig


class Reserve(NamedTuple):
    gpus: int  # GPUs to keep free now: the configured floor plus the adaptive part
    held: int  # of those, what a rising smooth rate kept beyond the window's ask


class ReserveTracker:
    """History of needed inference GPUs and the reserve it implies. Not thread-safe."""

    def __init__(self, pool: PoolConfig) -> None:
        self._floor = pool.reserveGPUs
        self._cfg = pool.adaptiveReserve
        self._history: deque[tuple[float, int, int]] = deque()  # (time, held, needed)
        self._last = 0  # the adaptive part the last `reserve` call gave (held while rising)

    def copy(self) -> ReserveTracker:
        """An independent tracker with the same settings and history (for pure cycle steps)."""
        twin = ReserveTracker.__new__(ReserveTracker)
        twin._floor, twin._cfg, twin._history = self._floor, self._cfg, deque(self._history)
        twin._last = self._last
        return twin

    def reconfigure(self, pool: PoolConfig) -> None:
        """Apply a reloaded config, keeping the demand history."""
        self._floor = pool.reserveGPUs
        self._cfg = pool.adaptiveReserve
        if not self._cfg.enabled:
            self._history.clear()
            self._last = 0

    def observe(self, now: float, held_gpus: int, needed_gpus: int | None = None) -> None:
        """Record the GPUs inference holds or asks for at `now` (accounting.inference_gpus)
        and those its load needed (None: the same; more than held counts as held)."""
        if held_gpus < 0 or (needed_gpus is not None and needed_gpus < 0):
            raise ValueError(f"GPU counts must be >= 0, got {held_gpus}, {needed_gpus}")
        if not self._cfg.enabled:
            return
        if self._history and now < self._history[-1][0]:
            return  # clock went backwards: keep the history ordered, drop the sample
        need = held_gpus if needed_gpus is None else min(needed_gpus, held_gpus)
        self._history.append((now, held_gpus, need))
        self._prune(now)

    def _prune(self, now: float) -> None:
        horizon = now - self._cfg.windowSeconds
        while self._history and self._history[0][0] < horizon:
            self._history.popleft()

    def adaptive_gpus(self, now: float, lead_seconds: float | None = None) -> int:
        """Largest rise within one lead time inside the trailing window, capped at maxGPUs.
        `lead_seconds`: the lead to cover (None: leadTimeSeconds; see `lead`)."""
        if not self._cfg.enabled:
            return 0
        self._prune(now)
        lead = self._cfg.leadTimeSeconds if lead_seconds is None else lead_seconds
        # Sliding-window minimum of held GPUs over the last `lead` seconds (monotonic deque
        # of indices): the rise ending at sample j is need_j − min{held_i : t_j − lead ≤ t_i ≤ t_j}.
        samples = list(self._history)
        window: deque[int] = deque()
        best = 0
        for j, (t, held, need) in enumerate(samples):
            while window and samples[window[-1]][1] >= held:
                window.pop()
            window.append(j)
            while samples[window[0]][0] < t - lead:
                window.popleft()
            best = max(best, need - samples[window[0]][1])
        return min(self._cfg.maxGPUs, best)

    def reserve(
        self, now: float, lead_seconds: float | None = None, *, rising: bool = False
    ) -> Reserve:
        """GPUs to keep free now: the configured floor plus the adaptive part. `rising`: a
        smooth service's rate is climbing, so the adaptive part keeps at least what the last
        call gave (capped at maxGPUs, which a reload may have lowered)."""
        asked = self.adaptive_gpus(now, lead_seconds)
        adaptive = asked
        if rising and self._cfg.enabled:
            adaptive = max(asked, min(self._last, self._cfg.maxGPUs))
        self._last = adaptive
        return Reserve(self._floor + adaptive, adaptive - asked)


def lead(pool: PoolConfig, give_back_s: float) -> float:
    """The reserve's lead when research gives GPUs back in `give_back_s` (core.giveback):
    leadTimeSeconds counts the configured grace (the chart: at least it), so research that
    returns sooner shortens it by the difference, to no less than the give-back itself,
    and never lengthens it."""
    configured = pool.adaptiveReserve.leadTimeSeconds
    cut = max(0.0, pool.forecast.researchGraceSeconds - give_back_s)
    return min(configured, max(give_back_s, configured - cut, 1.0))
