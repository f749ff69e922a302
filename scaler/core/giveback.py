"""Give-back: how long research pods take to return their GPUs, measured. Pure, no I/O.

    give-back of a pod = when it left the pool − when its deletion was requested
    planned give-back  = min(researchGraceSeconds, longest of the last `samples` give-backs)
                         (researchGraceSeconds until `minSamples` have been seen)

A new inference replica that lands on research GPUs waits for the give-back before it can
load the model, so the forecast looks ahead `coldStartSeconds` + the give-back and the
adaptive reserve covers rises over its `leadTimeSeconds`, which counts the grace period.
The chart's grace period (600 s) is only an upper bound: research that writes its checkpoint
on SIGTERM returns its GPUs in about a minute, and planning for 600 s then withholds GPUs for
nothing (bench, coding week under that contract: 83.8 % of the oracle's harvest planning
600 s, 89.0 % planning 60 s).

Why the longest and not a quantile: the pod a preemption picks may be the slow one, and one
late replica costs more than one cycle of lending. Why capped at the grace period: the
kubelet kills a pod at its grace period, so a longer measurement is the observation's own
lag (a pod seen gone one cycle late), a stuck node, or a misconfigured grace; explain shows
it, and the plan does not grow past what the SRE configured.

The caller (the cycle) feeds, each cycle, the research pods being deleted as the pod watch
sees them (pod uid -> wall time the deletion was requested) or None when it sees no pods
(static capacity, pods not watched, watch down: nothing is concluded from an absence then).
A pod is measured when it disappears from that map: its give-back is accurate to one cycle.
A pod deleted and gone between two cycles is never seen, which can only keep the plan longer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scaler.config import PoolConfig


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Research pods being deleted (uid -> wall time requested) and recent give-backs (s)."""

    # A plain dict by default (read-only by convention): a fresh state must pickle, as the
    # bench sends a policy to worker processes (`--jobs 2`); mappingproxy does not pickle.
    pending: Mapping[str, float] = field(default_factory=dict)
    samples: tuple[float, ...] = ()  # most recent last, at most giveBack.samples


@dataclass(frozen=True, slots=True)
class Planned:
    seconds: float  # the give-back the forecast and the reserve plan for
    measured: float | None  # longest recent give-back (None: fewer than minSamples)
    note: str  # for explain


def observe(
    prev: GiveBack, deleting: Mapping[str, float] | None, wall: float, keep: int
) -> GiveBack:
    """The pods in `prev.pending` that are no longer deleting have left: record their
    give-back at `wall`. `deleting` None: not observed this cycle, keep everything."""
    if deleting is None:
        return prev
    done = tuple(max(0.0, wall - t) for uid, t in prev.pending.items() if uid not in deleting)
    samples = (prev.samples + done)[-keep:]
    # The earliest request seen counts: a later delete with a shorter grace moves
    # deletionTimestamp so that the difference stays the first request, except when that is
    # already past (the kubelet's final grace-0 delete): then it reads "now".
    pending = {uid: min(t, prev.pending.get(uid, t)) for uid, t in deleting.items()}
    return GiveBack(MappingProxyType(pending), samples)


def planned(gb: GiveBack, pool: PoolConfig) -> Planned:
    grace = pool.forecast.researchGraceSeconds
    cfg = pool.giveBack
    samples = gb.samples[-cfg.samples :]  # (a reload may have lowered `samples`)
    if not cfg.learn:
        return Planned(grace, None, f"configured {grace:g} s (giveBack.learn off)")
    if len(samples) < cfg.minSamples:
        return Planned(
            grace,
            None,
            f"configured {grace:g} s ({len(samples)} of {cfg.minSamples} research "
            "deletions measured)",
        )
    longest = max(samples)
    if longest > grace:
        return Planned(
            grace,
            longest,
            f"configured {grace:g} s (measured up to {longest:.0f} s over the last "
            f"{len(samples)}: research holds its GPUs the whole grace period)",
        )
    return Planned(
        longest, longest, f"measured {longest:.0f} s (longest of the last {len(samples)})"
    )
