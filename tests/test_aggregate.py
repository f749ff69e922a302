"""aggregate(): TargetStates -> ServiceLoad (pure)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from scaler.core import histogram
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


NOTHING = dict(waiting=0, running=0, kv_usage_mean=0.0, kv_usage_max=0.0, tokens_per_s=None)
CASES = {
    "scaled-to-zero-is-real-data": (
        [],
        dict(ready=0, complete=True, usable=False, current=0, reason="", **NOTHING),
    ),
    "no-fresh-sample-no-made-up-usage": (
        [state("a", at=None, error="HTTP 500"), state("b", 3, kv=0.7, at=NOW - 31)],
        dict(ready=0, unhealthy=2, complete=False, usable=False, **NOTHING),
    ),
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


def test_targets_unknown_is_no_data_at_all() -> None:
    # Discovery does not know the targets: nothing counted, nothing usable, said why.
    assert aggregate("svc", None, NOW, STALE) == ServiceLoad(
        "svc", 0, 0, 0, 0.0, 0.0, 0.0, 0.0, None, False, "targets unknown"
    )


def test_the_load_is_named_for_its_service() -> None:
    assert aggregate("chat", [state("a", 1)], NOW, STALE).name == "chat"


def test_a_stale_target_without_an_error_is_named_stale() -> None:
    states = [state("a:8000", 1, at=NOW - 40), state("b:8000", at=None, error="HTTP 500")]
    assert aggregate("svc", states, NOW, STALE).reason == "a:8000: stale; b:8000: HTTP 500"


TTFT_A = ((0.5, 3.0), (2.0, 5.0), (math.inf, 6.0))
TTFT_B = ((0.5, 1.0), (2.0, 1.0), (math.inf, 4.0))
ITL_A = ((0.05, 40.0), (math.inf, 50.0))
ITL_B = ((0.05, 10.0), (math.inf, 30.0))


def test_latency_histograms_sum_over_the_fresh_targets_that_have_one() -> None:
    def with_deltas(
        addr: str, ttft: histogram.Buckets | None, itl: histogram.Buckets | None, **kw: Any
    ) -> TargetState:
        s = state(addr, **kw)
        return TargetState(
            s.address, s.phase, s.sample, s.sampled_at, ttft_delta=ttft, itl_delta=itl, delta_s=5.0
        )

    states = [
        with_deltas("a", TTFT_A, ITL_A),
        with_deltas("b", TTFT_B, ITL_B),
        with_deltas("c", None, None),  # its first scrape: no delta yet
        with_deltas("d", TTFT_A, ITL_A, at=NOW - 31),  # stale: not counted
    ]
    load = aggregate("svc", states, NOW, STALE)
    assert load.ttft == ((0.5, 4.0), (2.0, 6.0), (math.inf, 10.0))
    assert load.itl == ((0.05, 50.0), (math.inf, 80.0))
    # 10 first tokens in 5 s over a and b, c carries their mean: 3 fresh targets x 1/s
    assert load.requests_per_s == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("failing", "reason_end"),
    [
        pytest.param(1, "10.0.0.0:8000: HTTP 500", id="one"),
        pytest.param(5, "10.0.0.4:8000: HTTP 500", id="five-all-named"),
        pytest.param(6, "10.0.0.4:8000: HTTP 500 (+1 more)", id="six-five-named"),
        pytest.param(7, "10.0.0.4:8000: HTTP 500 (+2 more)", id="seven-five-named"),
    ],
)
def test_reason_names_the_failing_targets_only(failing: int, reason_end: str) -> None:
    states = [state(f"10.0.0.{i}:8000", at=None, error="HTTP 500") for i in range(failing)]
    states += [state("ok:8000", 1), state("new:8000", phase=TargetPhase.STARTING, at=None)]
    load = aggregate("svc", states, NOW, STALE)
    assert load.reason.startswith("10.0.0.0:8000: HTTP 500") and load.reason.endswith(reason_end)
    assert load.reason.count("HTTP 500") == min(failing, 5)
    assert load.reason.count("; ") == min(failing, 5) - 1
    assert "ok:8000" not in load.reason and "new:8000" not in load.reason
