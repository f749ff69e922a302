"""Reserve: GPUs kept free so inference can grow without first waiting for preemption.

    reserve = pool.reserveGPUs + min(maxGPUs, largest rise in needed inference GPUs
                                      over any leadTimeSeconds span in the last windowSeconds)

The adaptive part is sized from what actually happened recently: if inference needed up to
12 more GPUs within one model-load lead time during the last hour, keep 12 free (capped), so
the next such ramp lands on free GPUs while research pods are still checkpointing. Pure:
the caller feeds (time, needed GPUs) samples with its own clock.
"""

from __future__ import annotations

from collections import deque

from scaler.config import PoolConfig


class ReserveTracker:
    """History of needed inference GPUs and the reserve it implies. Not thread-safe."""

    def __init__(self, pool: PoolConfig) -> None:
        self._floor = pool.reserveGPUs
        self._cfg = pool.adaptiveReserve
        self._history: deque[tuple[float, int]] = deque()

    def copy(self) -> ReserveTracker:
        """An independent tracker with the same settings and history (for pure cycle steps)."""
        twin = ReserveTracker.__new__(ReserveTracker)
        twin._floor, twin._cfg, twin._history = self._floor, self._cfg, deque(self._history)
        return twin

    def reconfigure(self, pool: PoolConfig) -> None:
        """Apply a reloaded config, keeping the demand history."""
        self._floor = pool.reserveGPUs
        self._cfg = pool.adaptiveReserve
        if not self._cfg.enabled:
            self._history.clear()

    def observe(self, now: float, needed_gpus: int) -> None:
        """Record the GPUs inference needs at `now` (e.g. accounting.inference_gpus)."""
        if needed_gpus < 0:
            raise ValueError(f"needed_gpus must be >= 0, got {needed_gpus}")
        if not self._cfg.enabled:
            return
        if self._history and now < self._history[-1][0]:
            return  # clock went backwards: keep the history ordered, drop the sample
        self._history.append((now, needed_gpus))
        self._prune(now)

    def _prune(self, now: float) -> None:
        horizon = now - self._cfg.windowSeconds
        while self._history and self._history[0][0] < horizon:
            self._history.popleft()

    def adaptive_gpus(self, now: float) -> int:
        """Largest rise within one lead time inside the trailing window, capped at maxGPUs."""
        if not self._cfg.enabled:
            return 0
        self._prune(now)
        lead = self._cfg.leadTimeSeconds
        # Sliding-window minimum over the last `lead` seconds (monotonic deque of indices):
        # the rise ending at sample j is g_j − min{g_i : t_j − lead ≤ t_i ≤ t_j}.
        samples = list(self._history)
        window: deque[int] = deque()
        best = 0
        for j, (t, g) in enumerate(samples):
            while window and samples[window[-1]][1] >= g:
                window.pop()
            window.append(j)
            while samples[window[0]][0] < t - lead:
                window.popleft()
            best = max(best, g - samples[window[0]][1])
        return min(self._cfg.maxGPUs, best)

    def reserve(self, now: float) -> int:
        """GPUs to keep free now: the configured floor plus the adaptive part."""
        return self._floor + self.adaptive_gpus(now)
