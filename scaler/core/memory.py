"""The control loop's memory as a versioned JSON document, so a restart keeps it.

What survives: per service the policy's memory (stabilization window, last raise, learned
batch, the slo signal's window and learned capacity, how much the request rate swings) and
the forecast history; for the pool
the measured research give-backs (core.giveback; kept at any age: new deletions replace
them, and pods being deleted across the restart are seen again from the API). What does
not: the adaptive reserve's recent history (and the level it holds while a smooth rate
rises), and the "one complete cycle" gate (research
waits for fresh data from every service after a start, as before).

Times inside `PolicyState` are monotonic seconds of the process that wrote them; the
document stores wall-clock seconds instead and `restore` maps them onto the new process's
monotonic clock. Pure: the caller reads and writes the text (scaler/ingest/state_store.py)
and passes both clocks in.

`restore` trusts nothing: a document of another kind, version or pool, written in the
future, malformed in any field, or older than `POLICY_MAX_AGE_S` (policy memory; the
forecast history is kept up to `pool.forecast.historyDays`) is ignored, with the reason
returned for the log line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from scaler.config import Config, InferenceService, forecast_for
from scaler.core.cycle import CycleState
from scaler.core.forecast import DAY, History, local_seconds
from scaler.core.giveback import GiveBack
from scaler.core.policy import PolicyState
from scaler.core.ramp import RateSwing
from scaler.core.slo import MAX_BIN, Learned, SloEntry

KIND = "gpu-pool-scaler/state"
VERSION = 1
# Policy memory older than this is not worth restoring: every window it holds (scale-down
# stabilization, slo window, cold start) is shorter, and the learned values may be stale.
POLICY_MAX_AGE_S = 3600.0
_CLOCK_SKEW_S = 300.0
_MAX_TEXT = 500  # characters of a stored note


class Invalid(ValueError):
    """The document cannot be trusted; the message says why (for the log line)."""


# --- dump ------------------------------------------------------------------------------


def dump(state: CycleState, cfg: Config, mono_now: float, wall_now: float) -> str:
    def w(t: float | None) -> float | None:  # monotonic -> wall clock
        return None if t is None else round(t - mono_now + wall_now, 3)

    services: dict[str, Any] = {}
    for svc in cfg.inference:
        entry: dict[str, Any] = {}
        p = state.policy.get(svc.name)
        if p is not None:
            entry["policy"] = {
                "desired": p.desired,
                "updatedAt": w(p.updated_at),
                "raisedAt": w(p.raised_at),
                "waitingAtRaise": p.waiting_at_raise,
                "lowSince": w(p.low_since),
                "loweredAt": w(p.lowered_at),
                "window": [[w(t), r] for t, r in p.window],
                "batchPerReplica": p.batch_per_replica,
                "sloWindow": [
                    [w(e.t), e.good, e.total, e.rps, e.ready, e.itl_good, e.itl_total]
                    for e in p.slo_window
                ],
                "learned": {
                    "capacityRps": p.learned.capacity_rps,
                    "bins": [list(b) for b in p.learned.bins],
                    "binnedAt": w(p.learned.binned_at),
                    "changedAt": w(p.learned.changed_at),
                    "source": p.learned.source,
                },
            }
            rs = p.rate_swing
            if rs is not None:
                entry["policy"]["rateSwing"] = [w(rs.since), w(rs.at), rs.total, rs.weight]
        h = state.forecast.get(svc.name)
        if h is not None:
            entry["forecast"] = {
                "slotSeconds": h.slot_s,
                "timeZone": h.tz,
                "days": {str(d): list(v) for d, v in sorted(h.days.items())},
            }
        if entry:
            services[svc.name] = entry
    doc = {
        "kind": KIND,
        "version": VERSION,
        "pool": cfg.pool.name,
        "savedAt": round(wall_now, 3),
        "services": services,
    }
    if state.give_back.samples:
        doc["giveBack"] = {"samples": [round(x, 3) for x in state.give_back.samples]}
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


# --- restore ---------------------------------------------------------------------------


def _num(v: Any, what: str, *, lo: float = -math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < lo:
        raise Invalid(f"{what} is not a number >= {lo:g}: {v!r}"[:200])
    return float(v)


def _opt(v: Any, what: str, *, lo: float = -math.inf) -> float | None:
    return None if v is None else _num(v, what, lo=lo)


def _text(v: Any, what: str) -> str | None:
    """A short printable note (it is shown by `explain`; a document is not trusted)."""
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > _MAX_TEXT or not v.isprintable():
        raise Invalid(f"{what} is not a printable string of at most {_MAX_TEXT} characters")
    return v


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise Invalid(f"{what} is not a count: {v!r}"[:200])
    return v


def _map(v: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise Invalid(f"{what} is not an object")
    return v


def _list(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list):
        raise Invalid(f"{what} is not a list")
    return v


def _rows(v: Any, what: str, shape: tuple[str, ...]) -> Iterator[tuple[str, list[Any]]]:
    """(name, row) of a list of fixed-length rows, e.g. [[time, replicas], ...]."""
    for i, e in enumerate(_list(v, what)):
        row = _list(e, f"{what}[{i}]")
        if len(row) != len(shape):
            raise Invalid(f"{what}[{i}] is not [{', '.join(shape)}]")
        yield f"{what}[{i}]", row


def _policy(d: Mapping[str, Any], name: str, clock: Any, now: float) -> PolicyState:
    # `what` below is the full path of the value (for the log line), e.g. "chat.raisedAt".
    def t(v: Any, what: str) -> float | None:
        x = _opt(v, what)
        if x is None:
            return None
        m = clock(x)
        if m > now + 1.0:
            raise Invalid(f"{what} is in the future")
        return m

    def at(v: Any, what: str) -> float:
        x = t(v, what)
        if x is None:
            raise Invalid(f"{what} has no time")
        return x

    window = []
    for what, pair in _rows(d.get("window", []), f"{name}.window", ("time", "replicas")):
        window.append((at(pair[0], what), _int(pair[1], what)))
    slo_window = []
    entry = ("time", "good", "total", "rps", "ready", "itl good", "itl total")
    for what, row in _rows(d.get("sloWindow", []), f"{name}.sloWindow", entry):
        slo_window.append(
            SloEntry(
                at(row[0], what),
                _num(row[1], f"{what} good", lo=0),
                _num(row[2], f"{what} total", lo=0),
                _opt(row[3], f"{what} rps", lo=0),
                _int(row[4], f"{what} ready"),
                _num(row[5], f"{what} itl good", lo=0),
                _num(row[6], f"{what} itl total", lo=0),
            )
        )
    learned = _map(d.get("learned", {}), f"{name}.learned")
    bins = []
    for what, row in _rows(
        learned.get("bins", []), f"{name}.learned.bins", ("bin", "within", "requests")
    ):
        k = _int(row[0], what)
        good = _num(row[1], f"{what} within", lo=0)
        total = _num(row[2], f"{what} requests", lo=0)
        if not 0 <= k <= MAX_BIN or good > total:
            raise Invalid(f"{what} is out of range")
        bins.append((k, good, total))
    rate_swing = None
    if d.get("rateSwing") is not None:
        what = f"{name}.rateSwing"
        row = _list(d["rateSwing"], what)
        if len(row) != 4:
            raise Invalid(f"{what} is not [since, at, total, weight]")
        since, last = at(row[0], f"{what} since"), at(row[1], f"{what} at")
        total, weight = _num(row[2], f"{what} total", lo=0), _num(row[3], f"{what} weight", lo=0)
        if since > last or weight > 1:
            raise Invalid(f"{what} is out of range")
        rate_swing = RateSwing(since, last, total, weight)
    desired = d.get("desired")
    updated = t(d.get("updatedAt"), f"{name}.updatedAt")
    if updated is None:
        raise Invalid(f"{name}.updatedAt missing")
    return PolicyState(
        desired=None if desired is None else _int(desired, f"{name}.desired"),
        updated_at=updated,
        raised_at=t(d.get("raisedAt"), f"{name}.raisedAt"),
        waiting_at_raise=_num(d.get("waitingAtRaise", 0.0), f"{name}.waitingAtRaise", lo=0),
        low_since=t(d.get("lowSince"), f"{name}.lowSince"),
        lowered_at=t(d.get("loweredAt"), f"{name}.loweredAt"),
        window=tuple(window),
        batch_per_replica=_opt(d.get("batchPerReplica"), f"{name}.batchPerReplica", lo=0),
        slo_window=tuple(slo_window),
        learned=Learned(
            _opt(learned.get("capacityRps"), f"{name}.learned.capacityRps", lo=0),
            t(learned.get("changedAt"), f"{name}.learned.changedAt"),
            bins=tuple(sorted(bins)),
            binned_at=t(learned.get("binnedAt"), f"{name}.learned.binnedAt"),
            source=_text(learned.get("source"), f"{name}.learned.source"),
        ),
        rate_swing=rate_swing,
    )


def _history(
    d: Mapping[str, Any], svc: InferenceService, cfg: Config, wall_now: float
) -> History | None:
    name = svc.name
    slot = _num(d.get("slotSeconds"), f"{name}.forecast.slotSeconds", lo=1)
    if slot != cfg.pool.forecast.slotSeconds:
        return None  # the slots do not line up with the configured ones: start over
    tz = d.get("timeZone", "UTC")  # state written before the setting kept UTC days
    if not isinstance(tz, str):
        raise Invalid(f"{name}.forecast.timeZone is not a string: {tz!r}"[:200])
    if tz != forecast_for(cfg.pool.forecast, svc).timeZone:
        return None  # days of another zone do not line up either: start over
    per_day = max(1, round(DAY / slot))
    today = math.floor(local_seconds(tz, wall_now) / DAY)
    days: dict[int, tuple[int, ...]] = {}
    for key, row in _map(d.get("days"), f"{name}.forecast.days").items():
        if not key.lstrip("-").isdigit():
            raise Invalid(f"{name}.forecast.days key {key!r} is not a day number"[:200])
        day = int(key)
        vals = _list(row, f"{name}.forecast.days[{key}]")
        if len(vals) != per_day:
            raise Invalid(f"{name}.forecast.days[{key}] has {len(vals)} slots, not {per_day}")
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or v < -1:
                raise Invalid(f"{name}.forecast.days[{key}] holds {v!r}"[:200])
        if today - cfg.pool.forecast.historyDays < day <= today:
            days[day] = tuple(vals)
    return History(slot, MappingProxyType(days), tz)


def restore(
    text: str, cfg: Config, mono_now: float, wall_now: float
) -> tuple[CycleState | None, str]:
    """(the state to start from, a line for the log). None: start empty (the line says why)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, f"state ignored: not JSON ({e})"[:300]
    try:
        return _restore(doc, cfg, mono_now, wall_now)
    except Invalid as e:
        return None, f"state ignored: {e}"
    except (TypeError, AttributeError, KeyError, ValueError) as e:  # any shape we missed
        return None, f"state ignored: malformed ({type(e).__name__}: {e})"[:300]


def _restore(
    doc: Any, cfg: Config, mono_now: float, wall_now: float
) -> tuple[CycleState | None, str]:
    d = _map(doc, "document")
    if d.get("kind") != KIND:
        return None, f"state ignored: kind {d.get('kind')!r} is not {KIND!r}"[:300]
    if d.get("version") != VERSION:
        return None, f"state ignored: version {d.get('version')!r}, this scaler reads {VERSION}"
    if d.get("pool") != cfg.pool.name:
        return None, f"state ignored: written for pool {d.get('pool')!r}, not {cfg.pool.name!r}"
    saved = _num(d.get("savedAt"), "savedAt", lo=0)
    age = wall_now - saved
    if age < -_CLOCK_SKEW_S:
        return None, f"state ignored: saved {-age:.0f} s in the future (clock skew?)"

    def clock(wall: float) -> float:
        return wall - wall_now + mono_now

    policy: dict[str, PolicyState] = {}
    history: dict[str, History] = {}
    services = _map(d.get("services", {}), "services")
    configured = {s.name: s for s in cfg.inference}
    for name, entry in services.items():
        svc = configured.get(name)
        if svc is None:
            continue  # removed from the config meanwhile
        e = _map(entry, f"services.{name}")
        if "policy" in e and age <= POLICY_MAX_AGE_S:
            policy[name] = _policy(_map(e["policy"], name), name, clock, mono_now)
        if "forecast" in e:
            h = _history(_map(e["forecast"], f"{name}.forecast"), svc, cfg, wall_now)
            if h is not None:
                history[name] = h
    samples = tuple(
        _num(v, "giveBack.samples[]", lo=0)
        for v in _list(
            _map(d.get("giveBack", {}), "giveBack").get("samples", []), "giveBack.samples"
        )
    )[-cfg.pool.giveBack.samples :]
    state = CycleState(
        policy=MappingProxyType(policy),
        forecast=MappingProxyType(history),
        give_back=GiveBack(samples=samples),
    )
    parts = [f"policy memory of {len(policy)} service(s)"]
    if age > POLICY_MAX_AGE_S and any("policy" in _map(v, "s") for v in services.values()):
        parts = [f"policy memory too old ({age:.0f} s > {POLICY_MAX_AGE_S:.0f} s), not used"]
    parts.append(f"forecast history of {len(history)} service(s)")
    parts.append(f"{len(samples)} research give-back(s)")
    return state, f"state restored (saved {max(0.0, age):.0f} s ago): " + ", ".join(parts)
