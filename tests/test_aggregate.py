"""aggregate(): TargetStates -> ServiceLoad (pure)."""

from __future__ import annotations

import pytest

from scaler.core.aggregate import aggregate
from scaler.core.load import EngineSample, ServiceLoad, TargetPhase, TargetState

NOW, STALE = 100.0, 30.0


def state(
    addr: str,
    waiting: float = 0,
    running: float = 0,
    kv: float = 0.0,
    kv_max: float | None = None,
    *,
    at: float | None = NOW,
    phase: TargetPhase = TargetPhase.SERVING,
    tps: float | None = None,
    error: str | None = None,
) -> TargetState:
    sample = (
        None if at is None else EngineSample(waiting, running, kv, kv if kv_max is None else kv_max)
    )
    return TargetState(addr, phase, sample, at, error, tps)


CASES = {
    "targets-unknown": (None, dict(ready=0, complete=False, usable=False)),
    "scaled-to-zero-is-real-data": ([], dict(ready=0, complete=True, usable=False, current=0)),
    "two-fresh": (
        [state("a", 4, 8, 0.2, tps=100.0), state("b", 6, 2, 0.6, 0.9, tps=50.0)],
        dict(
            ready=2,
            waiting=10,
            running=10,
            kv_usage_mean=0.4,
            kv_usage_max=0.9,
            tokens_per_s=150.0,
            complete=True,
            usable=True,
        ),
    ),
    "new-target-without-rate-carries-the-mean": (
        [state("a", tps=100.0), state("b", tps=None)],
        dict(ready=2, tokens_per_s=200.0, complete=True),
    ),
    "no-rate-at-all-abstains": (
        [state("a", tps=None), state("b", tps=None)],
        dict(ready=2, tokens_per_s=None, complete=True),
    ),
    "stale-target-makes-incomplete": (
        [state("a", 4), state("b", 50, at=NOW - 31, error="timeout after 2s")],
        dict(ready=1, unhealthy=1, waiting=4, complete=False, usable=False, current=2),
    ),
    "never-scraped": (
        [state("a", 1), state("b", at=None, error="no engine metrics")],
        dict(ready=1, unhealthy=1, complete=False),
    ),
    "starting-counts-as-current-not-load": (
        [state("a", 3), state("b", 99, phase=TargetPhase.STARTING)],
        dict(ready=1, starting=1, unhealthy=0, waiting=3, complete=True, current=2),
    ),
    "exactly-stale-after-is-still-fresh": (  # only *older* data is missing data
        [state("a", 4, at=NOW - STALE), state("b", 5, at=NOW - STALE - 0.001)],
        dict(ready=1, unhealthy=1, waiting=4, complete=False),
    ),
    "fresh-despite-latest-error": (  # last good sample still within staleAfterSeconds
        [state("a", 7, at=NOW - 10, error="timeout after 2s")],
        dict(ready=1, waiting=7, complete=True),
    ),
}


@pytest.mark.parametrize(("states", "expected"), CASES.values(), ids=CASES.keys())
def test_aggregate(states: list[TargetState] | None, expected: dict[str, object]) -> None:
    load = aggregate("svc", states, NOW, STALE)
    assert isinstance(load, ServiceLoad)
    for field, want in expected.items():
        got = getattr(load, field)
        if isinstance(want, float):
            assert got == pytest.approx(want), field
        else:
            assert got == want, field


@pytest.mark.parametrize(
    ("failing", "reason_end"),
    [
        pytest.param(1, "10.0.0.0:8000: HTTP 500", id="one"),
        pytest.param(5, "10.0.0.4:8000: HTTP 500", id="five-all-named"),
        pytest.param(7, "10.0.0.4:8000: HTTP 500 (+2 more)", id="seven-five-named"),
    ],
)
def test_reason_names_the_failing_targets_only(failing: int, reason_end: str) -> None:
    states = [state(f"10.0.0.{i}:8000", at=None, error="HTTP 500") for i in range(failing)]
    states += [state("ok:8000", 1), state("new:8000", phase=TargetPhase.STARTING, at=None)]
    load = aggregate("svc", states, NOW, STALE)
    assert load.reason.startswith("10.0.0.0:8000: HTTP 500") and load.reason.endswith(reason_end)
    assert load.reason.count("HTTP 500") == min(failing, 5)
    assert "ok:8000" not in load.reason and "new:8000" not in load.reason
