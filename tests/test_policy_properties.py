"""Property-based tests of the inference policy (hypothesis).

Bounds, monotonicity in load, settling under constant load with replicas that follow the
target (with a model-load delay), stale data never lowering, and replicas on the way never
raising the target. Sizes are kept small so the whole file runs in a few seconds. Every
decision gets the chart's default lead (cold start + research grace, 720 s), so the ramp
signal projects as far as it does in a cluster.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

from hypothesis import assume, example, given
from hypothesis import strategies as st

from scaler.config import InferenceService, Slo, Thresholds
from scaler.core.decision import ServiceDecision, SignalVerdict
from scaler.core.load import ServiceLoad
from scaler.core.policy import PolicyState
from scaler.core.policy import decide as decide_once
from tests.support.fuzz import budget

LEAD_S = 720.0


def decide(
    svc: InferenceService, load: ServiceLoad, prev: PolicyState | None, now: float, **kw: Any
) -> tuple[ServiceDecision, PolicyState]:
    kw.setdefault("lead_s", LEAD_S)
    return decide_once(svc, load, prev, now, **kw)


PROFILE = budget(80)
# Closed-loop simulations cost ~1-3k decisions per example.
SIM_PROFILE = budget(40)

_SIGNAL_KEYS = (
    "waitingPerReplica",
    "kvCacheUsage",
    "runningPerReplica",
    "tokensPerSecondPerReplica",
)


@st.composite
def services(draw: st.DrawFn) -> InferenceService:
    thresholds: dict[str, Any] = {
        "waitingPerReplica": draw(st.sampled_from([0, 0, 1, 5, 12.5])),
        "kvCacheUsage": draw(st.sampled_from([0, 0, 0.5, 0.8, 0.95])),
        "runningPerReplica": draw(st.sampled_from([0, 0, 2, 8])),
        "tokensPerSecondPerReplica": draw(st.sampled_from([0, 0, 500, 2000])),
        "kvCacheAggregation": draw(st.sampled_from(["mean", "max"])),
    }
    if not any(thresholds[k] for k in _SIGNAL_KEYS):
        thresholds["waitingPerReplica"] = 5
    lo = draw(st.integers(0, 4))
    hi = draw(st.integers(max(1, lo), 24))
    return InferenceService.model_validate(
        {
            "name": "svc",
            "gpusPerReplica": 1,
            "minReplicas": lo,
            "maxReplicas": hi,
            "targets": {"static": ["127.0.0.1:8000"]},
            "thresholds": thresholds,
            "scaleUp": {"maxStepReplicas": draw(st.integers(0, 4))},
            "scaleDown": {
                "stabilizationSeconds": draw(st.sampled_from([0, 15, 60, 300])),
                "maxStepReplicas": draw(st.integers(1, 5)),
                "stepSeconds": draw(st.sampled_from([0, 10, 60])),
                # None: the default (stabilizationSeconds / 10); 0: off.
                "smoothingSeconds": draw(st.sampled_from([None, 0, 30, 120])),
            },
            "coldStartSeconds": draw(st.sampled_from([0, 60, 180])),
            # The slo signal on in a third of the services (vLLM histograms, see test_slo.py).
            "slo": draw(
                st.sampled_from(
                    [None, None, {"ttftSeconds": 2, "attainment": 0.95, "windowSeconds": 60}]
                )
            ),
        }
    )


# TTFT bounds like vLLM's (a histogram delta per cycle: `good` of `total` within 1 s).
def ttft_hist(good: float, total: float) -> tuple[tuple[float, float], ...]:
    return ((1.0, good), (2.5, good), (5.0, total), (math.inf, total))


@st.composite
def loads(draw: st.DrawFn, *, usable: bool | None = None) -> ServiceLoad:
    complete = draw(st.booleans()) if usable is None else usable
    ready = draw(st.integers(1 if usable else 0, 20))
    kv_mean = draw(st.floats(0, 1))
    return ServiceLoad(
        name="svc",
        ready=ready,
        starting=draw(st.integers(0, 6)),
        unhealthy=0 if complete else draw(st.integers(1, 4)),
        waiting=draw(st.floats(0, 400)),
        running=draw(st.floats(0, 300)),
        kv_usage_mean=kv_mean,
        kv_usage_max=draw(st.floats(kv_mean, 1)),
        tokens_per_s=draw(st.none() | st.floats(0, 60000)),
        complete=complete,
        reason="" if complete else "scrape failed",
        **draw(slo_measurements()),
    )


@st.composite
def slo_measurements(draw: st.DrawFn) -> dict[str, Any]:
    """A cycle's TTFT histogram delta and request rate, or none (no histogram)."""
    if draw(st.booleans()):
        return {}
    total = draw(st.integers(0, 400))
    good = draw(st.integers(0, total))
    return {"ttft": ttft_hist(good, total), "requests_per_s": draw(st.floats(0, 80))}


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[float, ServiceLoad]]:
    steps = draw(st.lists(st.tuples(st.sampled_from([1, 5, 30, 120]), loads()), max_size=12))
    now, out = 0.0, []
    for dt, load in steps:
        now += dt
        out.append((now, load))
    return out


def replay(
    svc: InferenceService, history: list[tuple[float, ServiceLoad]]
) -> tuple[PolicyState | None, float, list[int | None]]:
    state: PolicyState | None = None
    seen: list[int | None] = []
    now = 0.0
    for now, load in history:
        d, state = decide(svc, load, state, now)
        seen.append(d.desired)
    return state, now, seen


@PROFILE
@given(services(), histories(), loads())
def test_target_always_within_min_max(
    svc: InferenceService, history: list[tuple[float, ServiceLoad]], last: ServiceLoad
) -> None:
    state, now, seen = replay(svc, history)
    d, _ = decide(svc, last, state, now + 5)
    seen.append(d.desired)
    for desired in seen:
        assert desired is None or svc.minReplicas <= desired <= svc.maxReplicas
    # None only until the first usable data: once a target exists it is never withdrawn.
    first = next((i for i, x in enumerate(seen) if x is not None), len(seen))
    assert all(x is not None for x in seen[first:])


@PROFILE
@given(
    services(),
    histories(),
    loads(usable=True),
    st.floats(0, 200),
    st.floats(0, 200),
    st.floats(0, 0.5),
    st.floats(0, 20000),
    st.booleans(),
)
def test_more_load_never_lowers_the_target(
    svc: InferenceService,
    history: list[tuple[float, ServiceLoad]],
    load: ServiceLoad,
    more_waiting: float,
    more_running: float,
    more_kv: float,
    more_tokens: float,
    smooth: bool,
) -> None:
    state, now, _ = replay(svc, history)
    heavier = replace(
        load,
        waiting=load.waiting + more_waiting,
        running=load.running + more_running,
        kv_usage_mean=min(1.0, load.kv_usage_mean + more_kv),
        kv_usage_max=min(1.0, load.kv_usage_max + more_kv),
        tokens_per_s=None if load.tokens_per_s is None else load.tokens_per_s + more_tokens,
    )
    # (`smooth`: a rate below minRateSwing, where the queue's hold band stands aside)
    light, _ = decide(svc, load, state, now + 5, smooth_rate=smooth)
    heavy, _ = decide(svc, heavier, state, now + 5, smooth_rate=smooth)
    if light.desired is None:  # only possible when every enabled signal abstains
        assert heavy.desired is None
    else:
        assert heavy.desired is not None and heavy.desired >= light.desired


@PROFILE
@given(
    services(),
    histories(),
    loads(usable=True),
    st.lists(st.none() | st.integers(0, 40), max_size=12),
    st.integers(0, 40),
)
def test_a_forecast_never_lowers_the_target(
    svc: InferenceService,
    history: list[tuple[float, ServiceLoad]],
    load: ServiceLoad,
    earlier: list[int | None],
    predicted: int,
) -> None:
    """Whatever forecasts came before (and dropped), a forecast now only adds: the target
    with it is at least the target without it, from the same state."""
    state: PolicyState | None = None
    now = 0.0
    for (now, past), f in zip(history, [*earlier, *[None] * len(history)], strict=False):
        fv = None if f is None else SignalVerdict("forecast", f, f, f)
        _, state = decide(svc, past, state, now, forecast=fv)
    fv = SignalVerdict("forecast", predicted, predicted, predicted)
    without, _ = decide(svc, load, state, now + 5)
    with_it, _ = decide(svc, load, state, now + 5, forecast=fv)
    assert with_it.desired is not None
    # Without it there may be no target yet (every load signal abstains, no history): the
    # forecast's reading then gives the first one, which is adding too.
    assert without.desired is None or with_it.desired >= without.desired


@PROFILE
@given(services(), histories(), loads(usable=False))
def test_stale_data_never_lowers_the_target(
    svc: InferenceService, history: list[tuple[float, ServiceLoad]], stale: ServiceLoad
) -> None:
    if stale.complete:  # loads(usable=False) with complete=True still has ready=0..20
        stale = replace(stale, complete=False, unhealthy=max(1, stale.unhealthy))
    state, now, _ = replay(svc, history)
    d, after = decide(svc, stale, state, now + 5)
    assert not d.fresh
    assert after.low_since is None  # no evidence: the scale-down window restarts
    floor = min(svc.maxReplicas, max(stale.current, svc.minReplicas))
    if state is not None and state.desired is not None:
        floor = min(svc.maxReplicas, max(state.desired, floor))
        assert d.desired is not None and d.desired >= floor
    if d.desired is None or d.desired == floor:
        return  # held
    # A raise: only on replicas read, and exactly what they ask as the whole service.
    assert stale.ready > 0 and d.desired > floor, (d, floor)
    alone, _ = decide(svc, replace(stale, complete=True, unhealthy=0, reason=""), state, now + 5)
    assert alone.desired is not None and d.desired == alone.desired <= svc.maxReplicas
    assert after.desired == d.desired


@PROFILE
@given(services(), histories(), loads(usable=True), st.integers(1, 8))
def test_replicas_on_the_way_never_raise_the_target(
    svc: InferenceService,
    history: list[tuple[float, ServiceLoad]],
    load: ServiceLoad,
    extra_starting: int,
) -> None:
    state, now, _ = replay(svc, history)
    assume(state is not None and state.desired is not None and state.desired >= 1)
    assert state is not None and state.desired is not None
    # Only replicas we asked for are "on the way": keep ready + starting <= previous target.
    load = replace(load, ready=min(load.ready, state.desired), starting=0)
    extra_starting = min(extra_starting, state.desired - load.ready)
    more = replace(load, starting=extra_starting)
    base, _ = decide(svc, load, state, now + 5)
    with_more, _ = decide(svc, more, state, now + 5)
    assert with_more.desired is not None and base.desired is not None
    assert with_more.desired <= max(base.desired, state.desired)


@SIM_PROFILE
@given(
    svc=services(),
    waiting=st.floats(0, 300),
    running=st.floats(0, 200),
    kv_replicas=st.floats(0, 20),  # total KV in replica-equivalents: mean = min(1, kv / ready)
    kv_skew=st.floats(1, 2),
    tokens=st.none() | st.floats(0, 40000),
    initial=st.integers(0, 20),
    model_load_s=st.sampled_from([0, 5, 60, 180]),
)
def test_constant_load_settles_without_oscillation(
    svc: InferenceService,
    waiting: float,
    running: float,
    kv_replicas: float,
    kv_skew: float,
    tokens: float | None,
    initial: int,
    model_load_s: float,
) -> None:
    """Replicas follow the target (new ones serve after `model_load_s`); total load is constant
    and spreads over ready replicas. The target must move in one direction only, then stay."""
    dt = 5.0
    pods = [0.0] * initial  # time each pod becomes ready
    sd = svc.scaleDown
    horizon = sd.stabilizationSeconds + (svc.maxReplicas + 2) * max(sd.stepSeconds, dt)
    # KV saturates at 1.0, so a KV-driven ascent may add one replica per model load.
    horizon += (svc.maxReplicas + 2) * (model_load_s + dt) + 600
    state: PolicyState | None = None
    seen: list[int | None] = []
    for i in range(int(horizon / dt)):
        now = i * dt
        ready = sum(1 for p in pods if p <= now)
        kv_mean = min(1.0, kv_replicas / ready) if ready else 0.0
        load = ServiceLoad(
            name="svc",
            ready=ready,
            starting=len(pods) - ready,
            unhealthy=0,
            waiting=waiting if ready else 0.0,
            running=running if ready else 0.0,
            kv_usage_mean=kv_mean,
            kv_usage_max=min(1.0, kv_mean * kv_skew),
            tokens_per_s=tokens if ready else None,
            complete=True,
        )
        d, state = decide(svc, load, state, now)
        seen.append(d.desired)
        target = len(pods) if d.desired is None else d.desired
        if target > len(pods):
            pods += [now + model_load_s] * (target - len(pods))
        elif target < len(pods):
            pods = sorted(pods)[:target]  # the Deployment removes not-ready pods first

    first = next((i for i, x in enumerate(seen) if x is not None), len(seen))
    assert all(x is not None for x in seen[first:])
    values = [x for x in seen if x is not None]
    moves = [b - a for a, b in itertools.pairwise(values) if b != a]
    assert all(m > 0 for m in moves) or all(m < 0 for m in moves), f"oscillates: {moves}"
    tail = values[-100:]
    assert len(set(tail)) <= 1, f"not settled: {tail}"


# Found by a 2,500-example run: no queue signal, a concurrency target (8) above what the
# engine runs (5): each replica removed lowers `running`, the ask falls one more, and the
# descent to the fixed point (2) took a window per replica, past the old horizon.
def _found(max_replicas: int, step_down: int, **kw: Any) -> InferenceService:
    """A service a fuzz run found a counterexample with (pinned with @example); a
    `scaleDown` in `kw` overrides single keys of the default one."""
    scale_down = {"stabilizationSeconds": 300, "maxStepReplicas": step_down, "stepSeconds": 0}
    scale_down.update(kw.pop("scaleDown", {}))
    return InferenceService.model_validate(
        {
            "name": "svc",
            "gpusPerReplica": 1,
            "minReplicas": 0,
            "maxReplicas": max_replicas,
            "targets": {"static": ["127.0.0.1:8000"]},
            "scaleDown": scale_down,
            **kw,
        }
    )


_STAIRCASE = _found(7, 1, thresholds={"waitingPerReplica": 0, "runningPerReplica": 8})


@SIM_PROFILE
@example(_STAIRCASE, 33.0, 5, 0.125, None, 7, 0)
@given(
    svc=services(),
    demand=st.floats(0, 3000),  # requests in the service (running + waiting), constant
    batch=st.integers(1, 256),  # requests one replica runs at once (max-num-seqs or KV bound)
    kv_per_request=st.floats(0.001, 0.2),
    tokens_per_request=st.none() | st.floats(1, 50),  # tok/s per running request
    initial=st.integers(0, 20),
    model_load_s=st.sampled_from([0, 5, 60, 180]),
)
def test_saturating_replicas_under_constant_demand_settle(
    svc: InferenceService,
    demand: float,
    batch: int,
    kv_per_request: float,
    tokens_per_request: float | None,
    initial: int,
    model_load_s: float,
) -> None:
    """A vLLM-like model: each ready replica runs min(batch, 1 / kv_per_request) requests,
    the rest of the constant demand waits. The queue is not proportional to 1/replicas here
    (it appears all at once when one replica too few serves), the case where HPA's
    ceil(waiting / target) flaps. Before the batch size is learned (from the first real
    queue), that first queue may overshoot once; from then on the target moves one way only
    and settles. Where the replicas saturate, a signal sized on what they run (concurrency,
    KV, tokens) asks less after each replica removed, so a scale-down may take one window
    per replica: the horizon covers that staircase."""
    dt = 5.0
    pods = [0.0] * initial
    sd = svc.scaleDown
    steps = svc.maxReplicas + 2
    horizon = steps * (sd.stabilizationSeconds + max(sd.stepSeconds, dt)) + sd.stabilizationSeconds
    horizon += steps * (model_load_s + dt) + 900
    per_replica = min(float(batch), 1.0 / kv_per_request)
    state: PolicyState | None = None
    seen: list[int | None] = []
    learned_at: int | None = None
    for i in range(int(horizon / dt)):
        now = i * dt
        ready = sum(1 for p in pods if p <= now)
        running = min(demand, ready * per_replica)
        kv = running / ready * kv_per_request if ready else 0.0
        load = ServiceLoad(
            name="svc",
            ready=ready,
            starting=len(pods) - ready,
            unhealthy=0,
            waiting=demand - running if ready else 0.0,
            running=running,
            kv_usage_mean=kv,
            kv_usage_max=kv,
            tokens_per_s=None
            if tokens_per_request is None or not ready
            else running * tokens_per_request,
            complete=True,
        )
        d, state = decide(svc, load, state, now)
        seen.append(d.desired)
        if learned_at is None and state.batch_per_replica is not None:
            learned_at = i
        target = len(pods) if d.desired is None else d.desired
        if target > len(pods):
            pods += [now + model_load_s] * (target - len(pods))
        elif target < len(pods):
            pods = sorted(pods)[:target]

    def moves(xs: list[int | None]) -> list[int]:
        values = [x for x in xs if x is not None]
        return [b - a for a, b in itertools.pairwise(values) if b != a]

    def reversals(ms: list[int]) -> int:
        return sum(1 for a, b in itertools.pairwise(ms) if (a > 0) != (b > 0))

    assert reversals(moves(seen)) <= 2, f"flaps: {moves(seen)}"
    if learned_at is not None:
        after = moves(seen[learned_at + 1 :])
        assert reversals(after) == 0, f"flaps after learning the batch: {after}"
    else:
        assert reversals(moves(seen)) == 0, f"flaps: {moves(seen)}"
    values = [x for x in seen if x is not None]
    tail = values[-100:]
    assert len(set(tail)) <= 1, f"not settled: {tail}"


_ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


@PROFILE
@given(
    services(),
    histories(),
    st.integers(0, 20),
    st.integers(0, 6),
    _ANY_FLOAT,
    _ANY_FLOAT,
    _ANY_FLOAT,
    _ANY_FLOAT,
    st.none() | _ANY_FLOAT,
)
def test_garbage_numbers_never_crash_nor_lower(
    svc: InferenceService,
    history: list[tuple[float, ServiceLoad]],
    ready: int,
    starting: int,
    waiting: float,
    running: float,
    kv_mean: float,
    kv_max: float,
    tokens: float | None,
) -> None:
    state, now, _ = replay(svc, history)
    load = ServiceLoad("svc", ready, starting, 0, waiting, running, kv_mean, kv_max, tokens, True)
    d, _ = decide(svc, load, state, now + 5)
    assert d.desired is None or svc.minReplicas <= d.desired <= svc.maxReplicas
    finite = all(
        math.isfinite(v) and v >= 0 for v in (waiting, running, kv_mean, kv_max, tokens or 0.0)
    )
    if not finite and state is not None and state.desired is not None:
        assert d.desired is not None and d.desired >= state.desired


@PROFILE
@given(
    services(),
    histories(),
    loads(usable=True),
    st.integers(1, 200),
    st.integers(0, 200),
    st.booleans(),
)
def test_slower_first_tokens_never_lower_the_target(
    svc: InferenceService,
    history: list[tuple[float, ServiceLoad]],
    load: ServiceLoad,
    total: int,
    slower: int,
    smooth: bool,
) -> None:
    """The same requests, some of them later: the slo signal may only ask for more."""
    slower = min(slower, total)
    state, now, _ = replay(svc, history)
    fast = replace(load, ttft=ttft_hist(total, total), requests_per_s=load.requests_per_s or 5.0)
    slow = replace(fast, ttft=ttft_hist(total - slower, total))
    a, _ = decide(svc, fast, state, now + 5, smooth_rate=smooth)
    b, _ = decide(svc, slow, state, now + 5, smooth_rate=smooth)
    if a.desired is None:
        assert b.desired is None
    else:
        assert b.desired is not None and b.desired >= a.desired


# Found by `make fuzz` (FUZZ_SCALE=60): the bin that held at the learned capacity faded
# (24-h half-life) while the only misses were far above it; the reading fell one bin and the
# target went 11 -> 12 replicas 3.4 h into the constant load, in the horizon's last minute.
_FADING = _found(23, 2, scaleUp={"maxStepReplicas": 1})

# Found by `make fuzz` (FUZZ_SCALE=60): 14 replicas at 2.50 req/s each (all within) and 13
# at 2.69 (93 %) fall in one load bin whose pooled attainment stayed just above 0.95: no
# bin failed, nothing was learned, and the target went 14 -> 13 -> 14 234 times in 3.7 h.
_BIN_EDGE = _found(
    14, 1, coldStartSeconds=0, scaleDown={"stabilizationSeconds": 15, "stepSeconds": 60}
)


@SIM_PROFILE
@example(_FADING, 1.1015625, 0.5, 16, 60, False)
@example(_BIN_EDGE, 35.0, 2.5, 14, 0, False)
@example(_BIN_EDGE, 35.0, 2.5, 14, 0, True)
@given(
    svc=services(),
    rps=st.floats(0.5, 40),  # constant demand, requests/s
    capacity=st.floats(0.2, 5),  # requests/s one replica serves within the objective
    initial=st.integers(1, 20),
    model_load_s=st.sampled_from([0, 5, 60, 180]),
    smooth=st.booleans(),  # a rate below minRateSwing: steps down with the deadband
)
def test_slo_signal_under_constant_demand_settles(
    svc: InferenceService,
    rps: float,
    capacity: float,
    initial: int,
    model_load_s: float,
    smooth: bool,
) -> None:
    """A service whose replicas meet the objective up to `capacity` req/s each and miss it
    above (the share within the objective falls as 1 / overload). The slo signal learns the
    capacity from the load bins that miss the objective and keeps it, so the target settles:
    a bounded number of reversals, then one value."""
    svc = svc.model_copy(
        update={
            "slo": Slo(ttftSeconds=2, attainment=0.95, windowSeconds=60),
            # Demand here does not queue while scaled to zero: keep a replica to measure.
            "minReplicas": max(1, svc.minReplicas),
            "thresholds": Thresholds(waitingPerReplica=5.0),
        }
    )
    dt = 5.0
    pods = [0.0] * initial
    sd = svc.scaleDown
    horizon = 3 * (sd.stabilizationSeconds + (svc.maxReplicas + 2) * max(sd.stepSeconds, dt))
    horizon += (svc.maxReplicas + 2) * (model_load_s + svc.coldStartSeconds + 60 + dt) + 3600
    state: PolicyState | None = None
    seen: list[int | None] = []
    for i in range(int(horizon / dt)):
        now = i * dt
        ready = sum(1 for p in pods if p <= now)
        per = rps / ready if ready else 0.0
        served = min(rps, ready * capacity * 1.2) if ready else 0.0  # saturates above
        total = served * dt
        share = 1.0 if per <= capacity else capacity / per
        load = ServiceLoad(
            name="svc",
            ready=ready,
            starting=len(pods) - ready,
            unhealthy=0,
            waiting=0.0,
            running=min(per, capacity) * ready,
            kv_usage_mean=0.1,
            kv_usage_max=0.1,
            tokens_per_s=None,
            complete=True,
            ttft=ttft_hist(total * share, total) if ready else None,
            requests_per_s=served if ready else None,
        )
        d, state = decide(svc, load, state, now, smooth_rate=smooth)
        seen.append(d.desired)
        target = len(pods) if d.desired is None else d.desired
        if target > len(pods):
            pods += [now + model_load_s] * (target - len(pods))
        elif target < len(pods):
            pods = sorted(pods)[:target]
    values = [x for x in seen if x is not None]
    moves = [b - a for a, b in itertools.pairwise(values) if b != a]
    reversals = sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))
    # Each reversal is a probe past the capacity answered by a breach; every breach lowers
    # the probe ceiling by >= 5 %, so they are few (AIMD with a ceiling), then it settles.
    assert reversals <= 8, f"flaps: {moves}"
    tail = values[-100:]
    assert len(set(tail)) <= 1, f"not settled: {tail}"
    assert state is not None
    slo = svc.slo
    assert slo is not None
    start = min(initial, svc.maxReplicas)
    measurable = min(rps, start * capacity * 1.2) * (slo.windowSeconds - dt) >= slo.min_requests
    failing = [
        (g, t) for _, g, t in state.learned.bins if t >= slo.min_requests and g / t < slo.attainment
    ]
    if rps / start > capacity * 1.01 and svc.maxReplicas > initial and measurable and failing:
        # the path under test ran: a load bin that missed the objective taught a capacity
        assert state.learned.capacity_rps is not None


@PROFILE
@given(services(), histories(), loads(usable=True), st.sampled_from([0.0, 120.0, 720.0]))
def test_the_ramp_signal_never_lowers_the_target(
    svc: InferenceService,
    history: list[tuple[float, ServiceLoad]],
    load: ServiceLoad,
    lead_s: float,
) -> None:
    """The ramp signal only adds a reading: from the same state, with it on the target is
    never below what it is with it off."""
    if svc.slo is None:
        svc = svc.model_copy(update={"slo": Slo(ttftSeconds=2, attainment=0.95, windowSeconds=60)})
    assert svc.slo is not None
    off = svc.model_copy(update={"slo": svc.slo.model_copy(update={"rampDoublingSeconds": 0.0})})
    state, now, _ = replay(svc, history)
    if state is not None:  # a capacity learned, so the ramp can ask
        state = replace(state, learned=replace(state.learned, capacity_rps=0.5))
    with_it, _ = decide(svc, load, state, now + 5, lead_s=lead_s)
    without, _ = decide(off, load, state, now + 5, lead_s=lead_s)
    if without.desired is not None:
        assert with_it.desired is not None and with_it.desired >= without.desired
