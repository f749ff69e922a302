"""The SLO signal: measured attainment of a latency objective, and the replicas that meet it.

Per cycle the service's TTFT histogram delta (summed over fresh replicas, see
`core.aggregate`) becomes one `SloEntry`: requests with a first token within the objective
(linear interpolation inside the bucket that holds the objective, as Prometheus'
`histogram_quantile` does: requests are assumed spread evenly within a bucket), all
requests, the request rate and the ready replicas. The policy keeps the entries of the last
`slo.windowSeconds` in its state.

* attainment = Σ within / Σ all over the window (None below `slo.min_requests`: too few
  requests to tell from noise, the slo signal then asks nothing and the others decide);
* capacity: requests/s one ready replica serves at the objective, read off the attainment
  by load: every cycle's requests are counted (within, all) in the bin of the per-replica
  load they were served at (the last minute's request rate over the replicas ready now;
  log-spaced bins 10 % apart; counts decay with a 24-h half-life). Scanning the bins
  upwards, the capacity is the lower edge of the last bin that held before the first one that
  fails (its own attainment or that of all requests up to its load below the
  objective); see `capacity_from`. Counting requests, not windows, is what
  makes it robust to bursts: a window that breaches on one burst at a low average load
  adds a few misses to a bin of thousands, where the earlier rule (a breach sets the
  capacity to 90 % of the window's rate) learned half the real capacity on the bench's
  coding trace and over-provisioned for hours. Unknown until some load bin fails (or a
  scale-down misses, below): before that the existing signals alone size the service.
  Once read, it is raised when no bin fails any more and the objective held at a higher
  load, and lowered only by a miss at a load it allows (see `learn`). While no bin fails,
  a scale-down that missed at the same demand (`scale_down_missed`) caps the reading at
  the load that held before it: the bins pool n and n - 1 replicas' loads when they are
  under 10 % apart;
* the slo signal asks ceil(request rate over the window / capacity); on a breach at least
  one replica more than exist, unless replicas are already starting: then it holds what
  exists. Requests served before the last raise could take effect (raise +
  `coldStartSeconds`) do not count as a breach, so one slow window is answered once; while
  the window still holds such a breach, it asks at least the replicas that exist (no
  scale-down straight after a breach), and the scale-down window meanwhile keeps only the
  rate's ask (`calm`), so that hold and window overlap instead of adding up.

Pure: time comes in as `now`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from scaler.config import InferenceService, Slo
from scaler.core import histogram
from scaler.core.decision import SignalVerdict, SloStatus
from scaler.core.load import ServiceLoad

# The lowest load bin seen already fails: capacity = (1 - DECREASE) x its lower edge.
DECREASE = 0.10

_EPS = 1e-9
_MAX_ASK = 1e6  # replicas; the policy clamps to maxReplicas anyway

# Capacity from attainment by load: requests counted per bin of per-replica request rate.
BIN_BASE = 0.001  # req/s per replica: lower edge of bin 0
BIN_RATIO = 1.1  # each bin 10 % above the one below
MAX_BIN = 160  # 0.001 x 1.1^160 ~ 4,000 req/s per replica
LOAD_S = 60.0  # a cycle's load level: per-replica first tokens/s over the last minute
HALF_LIFE_S = 24 * 3600.0  # older counts fade: the service (model, prompts) may change
_MIN_COUNT = 0.01  # a bin decayed below this many requests is dropped


@dataclass(frozen=True, slots=True)
class SloEntry:
    """One cycle's measurement (compact: the histogram is reduced at the objective)."""

    t: float  # `now` of the cycle
    good: float  # requests with TTFT <= objective (interpolated)
    total: float  # requests with a first token in this cycle
    rps: float | None  # first tokens per second (all fresh replicas)
    ready: int
    itl_good: float = 0.0  # token intervals within slo.itlSeconds
    itl_total: float = 0.0


@dataclass(frozen=True, slots=True)
class Learned:
    """What the slo signal learned about the service (PolicyState keeps it)."""

    capacity_rps: float | None = None  # requests/s per ready replica at the objective
    changed_at: float | None = None  # when capacity last changed (one change per window)
    # (bin, requests within the objective, requests) per load bin, decayed; see `learn`.
    bins: tuple[tuple[int, float, float], ...] = ()
    binned_at: float | None = None  # when `bins` were last decayed
    # Where `capacity_rps` was read (for `explain`: an SRE asking "why this capacity?"):
    # the load bin that missed, a scale-down that missed, or the loads that held since.
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Measure:
    attainment: float | None
    requests: float
    rps: float | None
    per_replica: float | None
    itl_attainment: float | None


def observe(
    slo: Slo, load: ServiceLoad, window: tuple[SloEntry, ...], now: float
) -> tuple[SloEntry, ...]:
    """The window with this cycle's measurement appended (if any) and old entries dropped."""
    kept = tuple(e for e in window if now - slo.windowSeconds < e.t <= now)
    if load.ttft is None:
        return kept
    rps = load.requests_per_s
    if rps is not None and not (math.isfinite(rps) and rps >= 0):
        rps = None
    itl_good = itl_total = 0.0
    if slo.itlSeconds is not None and load.itl is not None:
        itl_good, itl_total = histogram.within(load.itl, slo.itlSeconds), histogram.total(load.itl)
    entry = SloEntry(
        now,
        histogram.within(load.ttft, slo.ttftSeconds),
        histogram.total(load.ttft),
        rps,
        load.ready,
        itl_good,
        itl_total,
    )
    return (*kept, entry)


def measure(window: tuple[SloEntry, ...], min_requests: int, since: float = -math.inf) -> Measure:
    es = [e for e in window if e.t >= since]
    total = sum(e.total for e in es)
    rates = [e.rps for e in es if e.rps is not None]
    per = [e.rps / e.ready for e in es if e.rps is not None and e.ready > 0]
    itl_total = sum(e.itl_total for e in es)
    return Measure(
        attainment=sum(e.good for e in es) / total if total >= max(1, min_requests) else None,
        requests=total,
        rps=sum(rates) / len(rates) if rates else None,
        per_replica=sum(per) / len(per) if per else None,
        itl_attainment=sum(e.itl_good for e in es) / itl_total if itl_total > 0 else None,
    )


def breached(slo: Slo, m: Measure | SloStatus) -> bool:
    if m.attainment is not None and m.attainment < slo.attainment - _EPS:
        return True
    return m.itl_attainment is not None and m.itl_attainment < slo.attainment - _EPS


def _settled_since(svc: InferenceService, raised_at: float | None) -> float:
    """Requests served before the last raise could take effect say nothing about it."""
    return -math.inf if raised_at is None else raised_at + svc.coldStartSeconds


def verdict(
    svc: InferenceService,
    load: ServiceLoad,
    window: tuple[SloEntry, ...],
    capacity: float | None,
    raised_at: float | None,
    capacity_source: str | None = None,
    deadband: float = 0.0,
    tolerance: float = 0.0,
) -> tuple[SignalVerdict, SloStatus]:
    """The slo signal's verdict this cycle and the status `explain` shows. Below the ready
    count the rate's ask x is taken max(`deadband` replicas, `tolerance` x x) higher, so a
    step down waits until the rate is clear of the count below (`policy.SMOOTH_DEADBAND`);
    the verdict's `need` stays ceil(x), so the history and the reserve do not record it."""
    slo = svc.slo
    assert slo is not None
    enough = slo.min_requests
    m = measure(window, enough)
    status = SloStatus(
        ttft_s=slo.ttftSeconds,
        objective=slo.attainment,
        window_s=slo.windowSeconds,
        attainment=m.attainment,
        requests=m.requests,
        capacity_rps=capacity,
        capacity_source=capacity_source,
        requests_per_s=m.rps,
        itl_s=slo.itlSeconds,
        itl_attainment=m.itl_attainment,
        bucket=None if load.ttft is None else histogram.bracket(load.ttft, slo.ttftSeconds),
    )
    value = m.attainment if m.attainment is not None else 1.0
    if m.attainment is None:
        note = f"{m.requests:.0f} requests in {slo.windowSeconds:.0f} s < {enough}: not measured"
        return SignalVerdict("slo", value, slo.attainment, 0, note=note), status
    base = 0
    x = None  # the rate's ask before rounding
    if capacity is not None and capacity > 0 and m.rps is not None:
        x = min(m.rps / capacity, _MAX_ASK)
        base = max(0, math.ceil(x - _EPS))
    need = base  # what the rate needs at the learned capacity (before the margin: docstring)
    margin = 0.0
    if x is not None and base < load.ready:
        margin = max(deadband, tolerance * x)
        wide = math.ceil(x + margin - _EPS)
        if wide <= base:
            margin = 0.0  # (nothing held: no note)
        base = min(load.ready, max(base, wide))
    recent = measure(window, enough, _settled_since(svc, raised_at))
    on_the_way = load.ready + load.starting
    note = f"TTFT <= {slo.ttftSeconds:g} s for {m.attainment:.2%} of {m.requests:.0f}"
    if capacity is not None:
        note += f"; capacity {capacity:.3g} req/s/replica"
    if margin > 0:
        note += f"; a step down waits until the rate is {margin:.2g} replicas clear of it"
    calm = None  # what the scale-down window keeps (None: `ask`)
    if breached(slo, recent):  # (measured after the last raise took effect)
        coming = load.starting > 0
        ask = max(base, on_the_way if coming else on_the_way + 1)
        note += "; below objective" + (": replicas on the way" if coming else "")
        need = ask  # short now, however many exist
    elif breached(slo, m):  # met since the last raise; the window still holds the breach
        ask = max(base, on_the_way)
        note += "; below objective before the last raise: holding"
        if base < ask:
            # The hold lasts while this window holds the breach; the scale-down window
            # keeps the rate's ask, so the two run side by side, not one after the other
            # (coding week: the holds ran back to back, 300 + 600 s after every breach).
            calm = base
            note += f" (the scale-down window keeps {base})"
    else:
        ask = base
    return SignalVerdict("slo", value, slo.attainment, ask, note=note, need=need, calm=calm), status


def sizes(slo: Slo, status: SloStatus) -> bool:
    """Whether the slo signal sizes the service this cycle: the objective (and the
    inter-token one, if set) measured over the window and met, a capacity learned and a
    request rate read. The queue signal then stops counting running requests below its
    hold level (see `policy.signal_verdicts`)."""
    if status.attainment is None or breached(slo, status):
        return False
    cap = status.capacity_rps
    return cap is not None and cap > 0 and status.requests_per_s is not None


def bin_of(per_replica_rps: float) -> int:
    """The load bin of a per-replica request rate (log-spaced, BIN_RATIO apart)."""
    if per_replica_rps <= BIN_BASE:
        return 0
    return min(MAX_BIN, int(math.log(per_replica_rps / BIN_BASE) / math.log(BIN_RATIO)))


def bin_edge(k: int) -> float:
    """Lower edge of bin k (req/s per replica)."""
    return BIN_BASE * BIN_RATIO**k


def capacity_from(slo: Slo, bins: Mapping[int, tuple[float, float]]) -> float | None:
    """The highest per-replica load the objective held at, from attainment by load.

    Scanning load bins upwards: a bin with at least `min_requests` whose own attainment is
    below the objective, or where the attainment of all requests served at this load or
    below falls under the objective, is where the service stops meeting it: capacity is
    the lower edge of the last bin below that held (or, if the lowest bin seen already fails, 90 %
    of its lower edge). No failing bin: None, the capacity is not known and the other
    signals size the service. (Taking the highest load seen instead was a ratchet: a
    service never run hot never sees a higher load, so the signal held it where it was;
    on the conversation week ours ran at 93 % of static peak.)
    """
    return _scan(slo, bins).capacity


class _Scan(NamedTuple):
    capacity: float | None  # `capacity_from`'s reading
    failing: int | None  # the load bin that failed (None: none fails)
    upto: tuple[float, float]  # (good, total) of all requests up to and in that bin


def _scan(slo: Slo, bins: Mapping[int, tuple[float, float]]) -> _Scan:
    """`capacity_from`'s reading, the load bin that failed and the requests up to it."""
    need = slo.min_requests
    cap: float | None = None
    cg = ct = 0.0
    for k in sorted(bins):
        g, t = bins[k]
        cg, ct = cg + g, ct + t
        # Its own attainment below the objective (a slack of "twice the allowed misses", or
        # of two standard errors, let a bin at 92-93 % pass a 95 % objective for many
        # breaches and flapped the property test; a bin failing on noise is read again as
        # its requests accumulate).
        # A bin with fewer requests fails too once its misses alone exceed what the
        # objective allows in `min_requests` (a clear miss at low traffic: waiting for
        # `min_requests` there took a flap per few requests).
        fails = _misses(slo, g, t) or (ct >= need and cg / ct < slo.attainment - _EPS)
        if fails:
            return _Scan(cap if cap is not None else bin_edge(k) * (1.0 - DECREASE), k, (cg, ct))
        if t >= need:
            # The bin's lower edge: a bin 10 % wide can hold two operating points, one
            # meeting the objective and one just missing it (n and n - 1 replicas): its top
            # would size for the missing one and flap between them.
            cap = bin_edge(k)
    return _Scan(None, None, (cg, ct))


def _misses(slo: Slo, good: float, total: float) -> bool:
    """Whether `total` requests with `good` within the objective are a miss: attainment
    below the objective with at least `min_requests`, or misses alone above what the
    objective allows in `min_requests` (a clear miss at low traffic)."""
    if total <= 0 or good / total >= slo.attainment - _EPS:
        return False
    return (
        total >= slo.min_requests or total - good > (1.0 - slo.attainment) * slo.min_requests + _EPS
    )


def scale_down_missed(slo: Slo, window: tuple[SloEntry, ...]) -> tuple[float, float] | None:
    """(held, missed) per-replica request rates when the window shows a scale-down that
    missed the objective at the same demand: its entries at m ready replicas met it (at
    least `min_requests`), the ones since at n < m miss it (`_misses`), and the request rate
    rose by less than a load bin (BIN_RATIO) in between, so the miss is the scale-down's
    doing, not a burst's. The capacity then lies between the two loads.

    The load bins cannot tell this apart when both loads fall in one bin (n and n - 1
    replicas are under 10 % apart from 11 replicas up): the requests pool, the bin's
    attainment can stay just above the objective, no bin fails and nothing is learned; the
    target then went n -> n - 1, breached, back to n, for hours (`make fuzz`: 14 <-> 13
    replicas at 35 req/s, capacity 2.5, 234 changes in 3.7 h).
    None: no such scale-down in the window."""
    if not window:
        return None
    n = window[-1].ready
    i = len(window)
    while i > 0 and window[i - 1].ready == n:
        i -= 1
    if i == 0 or n <= 0 or window[i - 1].ready <= n:
        return None
    m = window[i - 1].ready
    j = i
    while j > 0 and window[j - 1].ready == m:
        j -= 1
    held, since = measure(window[j:i], slo.min_requests), measure(window[i:], 0)
    if held.attainment is None or held.attainment < slo.attainment - _EPS:
        return None
    if since.attainment is None or not _misses(
        slo, since.attainment * since.requests, since.requests
    ):
        return None
    r_hi, r_lo = held.rps, since.rps
    if r_hi is None or r_lo is None or r_hi <= 0 or r_lo > r_hi * BIN_RATIO:
        return None
    return r_hi / m, r_lo / n


def held_up_to(slo: Slo, bins: Mapping[int, tuple[float, float]]) -> float | None:
    """Lower edge of the highest load bin that met the objective with at least
    `min_requests`, when no bin fails (`capacity_from` is None): a lower bound of the
    capacity, not the capacity (see `learn` for when it is used)."""
    need = slo.min_requests
    held = [k for k, (_, t) in bins.items() if t >= need]
    return bin_edge(max(held)) if held else None


def _faded_below(cap: float | None, failing: int | None, reading: float | None) -> bool:
    """A new reading below the old one with every miss above the old one: the bins that
    held in between faded out (24-h half-life), which is lack of evidence, not a reading.
    Lowering then added a replica hours into a constant load the objective held at (found
    by `make fuzz`: 11 -> 12 replicas 3.4 h in, 100 % within the objective)."""
    if cap is None or reading is None or cap >= reading or failing is None:
        return False
    return bin_edge(failing) > reading * (1 + _EPS)


def learn(
    svc: InferenceService,
    load: ServiceLoad,
    window: tuple[SloEntry, ...],
    prev: Learned,
    raised_at: float | None,
    now: float,
) -> Learned:
    """What is known for the next cycle: this cycle's requests added to the bin of the
    per-replica load they were served at (the rate over the last LOAD_S), older counts
    decayed (half-life HALF_LIFE_S), the capacity read off the bins (`capacity_from`)."""
    slo = svc.slo
    assert slo is not None
    bins = {k: (g, t) for k, g, t in prev.bins}
    if bins and prev.binned_at is not None and now > prev.binned_at:
        f = 0.5 ** ((now - prev.binned_at) / HALF_LIFE_S)
        bins = {k: (g * f, t * f) for k, (g, t) in bins.items() if t * f >= _MIN_COUNT}
    entry = window[-1] if window and window[-1].t == now else None
    if entry is not None and entry.total > 0 and entry.ready > 0:
        # The last minute's request rate over the replicas ready now: right after a
        # scale-up the requests count at the new, lower load at once (a per-entry average
        # would carry the old load for a minute and credit it with the new replicas' good
        # service, the flap `test_slo_signal_under_constant_demand_settles` caught).
        rate = measure(window, 0, now - LOAD_S).rps
        x = None if rate is None else rate / entry.ready
        if x is not None and x > 0:
            k = bin_of(x)
            g, t = bins.get(k, (0.0, 0.0))
            bins[k] = (g + entry.good, t + entry.total)
    # A capacity once read is replaced only by another reading, never forgotten for lack of
    # evidence (bins decay; a failing bin can pass again on noise): forgetting it made the
    # signal ask nothing and flap between n and n - 1 replicas. It is raised, though, when
    # no bin fails any more and the objective held at a higher load: the reading came from
    # a miss since outweighed by requests (a burst in the warm-up learned 1.27 req/s per
    # replica on the conversation week, where 2.7 held for 50,000 requests, and pinned the
    # service at maxReplicas for a day). Before any reading, none is made up from the loads
    # that held: that would hold a service never run hotter where it is.
    cap, failing, upto = _scan(slo, bins)
    source = None if failing is None else _bin_source(slo, bins[failing], failing, cap, upto)
    if cap is None and prev.capacity_rps is not None:
        up = held_up_to(slo, bins)
        if up is not None and up > prev.capacity_rps:
            cap, source = (
                up,
                f"no load bin misses the objective now; it held up to {up:.3g} req/s/replica",
            )
        else:
            cap, source = prev.capacity_rps, prev.source
    elif _faded_below(cap, failing, prev.capacity_rps):
        cap, source = prev.capacity_rps, prev.source
    # No bin fails, and a scale-down missed at the same demand: a reading that allows the
    # load that missed (or none) is at most the load that held before it
    # (`scale_down_missed`). While a bin fails the bins decide: applied then too, the
    # pairs a burst forms on the coding week cost 2 points of harvest (83.1 % vs 85.0 %).
    pair = scale_down_missed(slo, window) if failing is None else None
    if pair is not None and (cap is None or cap >= pair[1] * (1 - _EPS)):
        cap = pair[0]
        source = (
            f"a scale-down missed the objective at {pair[1]:.3g} req/s/replica at the same "
            f"demand; {pair[0]:.3g} held before it"
        )
    changed = prev.changed_at if cap == prev.capacity_rps else now
    return Learned(
        cap,
        changed,
        bins=tuple((k, g, t) for k, (g, t) in sorted(bins.items())),
        binned_at=now if bins else None,
        source=source,
    )


def _bin_source(
    slo: Slo,
    own: tuple[float, float],
    failing: int,
    cap: float | None,
    upto: tuple[float, float],
) -> str:
    """Why `_scan` read `cap`: the load bin that missed, with its (decayed) counts `own`,
    or those of every request up to it (`upto`, as `_scan` summed them)."""
    g, t = own
    lo, hi = bin_edge(failing), bin_edge(failing + 1)
    if _misses(slo, g, t):
        what = "its requests"
    else:  # the bin passed alone; all requests up to it did not
        g, t = upto
        what = "all requests at this load or below"
    line = f"load bin {lo:.3g}-{hi:.3g} req/s/replica missed the objective ({what}: "
    line += f"{g / t:.2%} of {t:.0f})"
    if cap is not None and math.isclose(cap, lo * (1.0 - DECREASE)):
        line += f"; no load below it held: {1.0 - DECREASE:.0%} of its lower edge"
    return line
