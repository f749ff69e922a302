"""Per-target memory between scrapes: last good sample, counter rates, reset detection."""

from __future__ import annotations

from dataclasses import dataclass

from scaler.discovery import Endpoint
from scaler.load import EngineSample, TargetState
from scaler.scrape import ScrapeResult


def _rate(prev: float | None, cur: float | None, dt: float) -> float | None:
    if prev is None or cur is None or dt <= 0 or cur < prev:
        return None  # missing, or a counter reset: no rate this time
    return (cur - prev) / dt


def _tokens(s: EngineSample) -> float | None:
    if s.prompt_tokens_total is None and s.generation_tokens_total is None:
        return None
    return (s.prompt_tokens_total or 0.0) + (s.generation_tokens_total or 0.0)


@dataclass(slots=True)
class _Memory:
    sample: EngineSample
    at: float
    tokens_per_s: float | None
    preemptions_per_s: float | None


class TargetTracker:
    """Turns scrape results into TargetStates; forgets targets no longer discovered."""

    def __init__(self) -> None:
        self._mem: dict[tuple[str, str], _Memory] = {}

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
            if res is not None and res.sample is not None:
                s = res.sample
                tps = pps = None
                if mem is not None:
                    restarted = (
                        s.process_start_seconds is not None
                        and mem.sample.process_start_seconds is not None
                        and s.process_start_seconds != mem.sample.process_start_seconds
                    )
                    if not restarted:
                        dt = res.at - mem.at
                        tps = _rate(_tokens(mem.sample), _tokens(s), dt)
                        pps = _rate(mem.sample.preemptions_total, s.preemptions_total, dt)
                mem = _Memory(s, res.at, tps, pps)
                self._mem[key] = mem
            error = None if res is None else res.error
            if res is None:
                error = "not scraped"
            states.append(
                TargetState(
                    address=ep.address,
                    phase=ep.phase,
                    sample=mem.sample if mem else None,
                    sampled_at=mem.at if mem else None,
                    error=error,
                    tokens_per_s=mem.tokens_per_s if mem else None,
                    preemptions_per_s=mem.preemptions_per_s if mem else None,
                )
            )
        for key in [k for k in self._mem if k[0] == service and k not in live]:
            del self._mem[key]
        return states

    def forget_service(self, service: str) -> None:
        for key in [k for k in self._mem if k[0] == service]:
            del self._mem[key]
