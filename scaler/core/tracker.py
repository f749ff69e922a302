"""Per-target memory between scrapes: last good sample, counter rates, reset detection.

Rates come from counter deltas between two good samples of the same target:
tokens/s = Δ(prompt + generation tokens) / Δt, preemptions/s = Δpreemptions / Δt.
A counter reset (server restart) shows as a changed `process_start_time_seconds` or as
any counter going down; that interval has no rate (None, never a made-up 0) and the new
sample becomes the baseline. A failed scrape keeps the last good sample and its time, so
the target goes stale (TargetState.fresh) instead of reading as idle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scaler.core import histogram
from scaler.core.histogram import Buckets
from scaler.core.load import Endpoint, EngineSample, ScrapeResult, TargetState

log = logging.getLogger("scaler.targets")


def _restarted(prev: EngineSample, cur: EngineSample) -> bool:
    if (
        prev.process_start_seconds is not None
        and cur.process_start_seconds is not None
        and prev.process_start_seconds != cur.process_start_seconds
    ):
        return True
    pairs = (
        (prev.prompt_tokens_total, cur.prompt_tokens_total),
        (prev.generation_tokens_total, cur.generation_tokens_total),
        (prev.preemptions_total, cur.preemptions_total),
    )
    if any(p is not None and c is not None and c < p for p, c in pairs):
        return True
    return histogram.decreased(prev.ttft_buckets, cur.ttft_buckets) or histogram.decreased(
        prev.itl_buckets, cur.itl_buckets
    )


def _delta(prev: float | None, cur: float | None) -> float | None:
    return None if prev is None or cur is None else cur - prev


def _tokens_delta(prev: EngineSample, cur: EngineSample) -> float | None:
    dp = _delta(prev.prompt_tokens_total, cur.prompt_tokens_total)
    dg = _delta(prev.generation_tokens_total, cur.generation_tokens_total)
    if dp is None or dg is None:
        # Not exported, or one counter appeared or vanished between scrapes: the sum is not
        # comparable.
        return None
    return dp + dg


@dataclass(slots=True)
class _Memory:
    sample: EngineSample
    at: float
    tokens_per_s: float | None
    preemptions_per_s: float | None
    resets: int
    # Histogram deltas over the last interval (None: first sample, reset, too long a gap).
    ttft_delta: Buckets | None = None
    itl_delta: Buckets | None = None
    delta_s: float | None = None


class TargetTracker:
    """Turns scrape results into TargetStates; forgets targets no longer discovered.

    `max_rate_interval_s`: a delta over a longer gap (the target was failing meanwhile)
    gives no rate rather than a long average posing as current throughput.
    """

    def __init__(self, *, max_rate_interval_s: float | None = None) -> None:
        self._mem: dict[tuple[str, str], _Memory] = {}
        # Last scrape error per target (None = ok): a log line on every change, so an
        # intermittently failing target shows in the logs before its data goes stale.
        self._last_error: dict[tuple[str, str], str | None] = {}
        self._max_dt = max_rate_interval_s

    def _advance(self, mem: _Memory | None, s: EngineSample, at: float) -> _Memory:
        """The memory after a new good sample: rates and histogram deltas since the last."""
        if mem is None:
            return _Memory(s, at, None, None, 0)
        if _restarted(mem.sample, s):
            return _Memory(s, at, None, None, mem.resets + 1)
        dt = at - mem.at
        if dt <= 0 or (self._max_dt is not None and dt > self._max_dt):
            return _Memory(s, at, None, None, mem.resets)
        dtok = _tokens_delta(mem.sample, s)
        dpre = _delta(mem.sample.preemptions_total, s.preemptions_total)
        return _Memory(
            s,
            at,
            None if dtok is None else dtok / dt,
            None if dpre is None else dpre / dt,
            mem.resets,
            histogram.delta(mem.sample.ttft_buckets, s.ttft_buckets),
            histogram.delta(mem.sample.itl_buckets, s.itl_buckets),
            dt,
        )

    def update(
        self, service: str, endpoints: list[Endpoint], results: dict[str, ScrapeResult]
    ) -> list[TargetState]:
        states = []
        live = set()
        for ep in endpoints:
            key = (service, ep.address)
            live.add(key)
            res = results.get(ep.address)
            mem = self._mem.get(key)
            new = False
            if res is not None and res.sample is not None:
                if mem is not None and res.at <= mem.at:
                    pass  # an older (or the same) result: keep what we have
                else:
                    mem = self._advance(mem, res.sample, res.at)
                    self._mem[key] = mem
                    new = True
            error = "not scraped" if res is None else res.error
            self._log_change(service, ep.address, error)
            states.append(
                TargetState(
                    address=ep.address,
                    phase=ep.phase,
                    sample=mem.sample if mem else None,
                    sampled_at=mem.at if mem else None,
                    error=error,
                    tokens_per_s=mem.tokens_per_s if mem else None,
                    preemptions_per_s=mem.preemptions_per_s if mem else None,
                    # Only with the sample that brought them: a held sample adds nothing.
                    ttft_delta=mem.ttft_delta if mem and new else None,
                    itl_delta=mem.itl_delta if mem and new else None,
                    delta_s=mem.delta_s if mem and new else None,
                )
            )
        for key in [k for k in self._mem if k[0] == service and k not in live]:
            del self._mem[key]
        for key in [k for k in self._last_error if k[0] == service and k not in live]:
            del self._last_error[key]
        return states

    def _log_change(self, service: str, address: str, error: str | None) -> None:
        key = (service, address)
        known = key in self._last_error
        if known and self._last_error[key] == error:
            return
        self._last_error[key] = error
        ctx = {"service": service, "target": address}
        if error is not None:
            log.warning("scrape failing: %s", error, extra=ctx)
        elif known:
            log.info("scrape recovered", extra=ctx)

    def resets(self, service: str, address: str) -> int:
        """Counter resets seen on this target since it was first tracked."""
        mem = self._mem.get((service, address))
        return 0 if mem is None else mem.resets

    def forget_service(self, service: str) -> None:
        for key in [k for k in self._mem if k[0] == service]:
            del self._mem[key]
        for key in [k for k in self._last_error if k[0] == service]:
            del self._last_error[key]
