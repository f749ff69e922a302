"""TargetTracker: counter rates, reset detection, staleness; times are injected."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import pytest

from scaler.core.aggregate import aggregate
from scaler.core.load import Endpoint, EngineSample, ScrapeJob, ScrapeResult, TargetPhase
from scaler.core.tracker import TargetTracker

A = "10.0.0.1:8000"
B = "10.0.0.2:8000"


def sample(
    prompt: float | None = 0.0,
    gen: float | None = 0.0,
    pre: float | None = 0.0,
    start: float | None = 1000.0,
    waiting: float = 0.0,
) -> EngineSample:
    return EngineSample(waiting, 0.0, 0.1, 0.1, prompt, gen, pre, start)


def ok(at: float, s: EngineSample, address: str = A) -> ScrapeResult:
    return ScrapeResult(ScrapeJob(address), s, None, at, 0.01)


def failed(at: float, address: str = A) -> ScrapeResult:
    return ScrapeResult(ScrapeJob(address), None, "timeout after 2s", at, 2.0, "timeout")


@dataclass(frozen=True)
class Step:
    result: ScrapeResult
    tokens_per_s: float | None
    preemptions_per_s: float | None = None
    sampled_at: float | None = None  # expected TargetState.sampled_at (default: result.at)


CASES = {
    "steady-rates": [
        Step(ok(0, sample(0, 0, 0)), None),
        Step(ok(5, sample(100, 400, 10)), 100.0, 2.0),
        Step(ok(10, sample(100, 900, 10)), 100.0, 0.0),
    ],
    "counter-decrease-is-reset": [
        Step(ok(0, sample(1000, 5000, 5)), None),
        Step(ok(5, sample(10, 40, 0)), None, None),  # restarted: no rate, new baseline
        Step(ok(10, sample(60, 90, 0)), 20.0, 0.0),
    ],
    "one-counter-decrease-is-reset": [
        # prompt went down, generation up more: the sum grows, still a reset.
        Step(ok(0, sample(1000, 0)), None),
        Step(ok(5, sample(0, 5000)), None, None),
    ],
    "preemption-decrease-is-reset": [
        Step(ok(0, sample(0, 0, 50)), None),
        Step(ok(5, sample(10, 10, 0)), None, None),
    ],
    "start-time-change-is-reset": [
        # Restarted and already past the old counts: only the start time tells.
        Step(ok(0, sample(100, 100, 0, start=1000.0)), None),
        Step(ok(5, sample(900, 900, 0, start=1003.0)), None, None),
        Step(ok(10, sample(950, 950, 0, start=1003.0)), 20.0, 0.0),
    ],
    "failed-scrape-keeps-last-good": [
        Step(ok(0, sample(0, 0)), None),
        Step(ok(5, sample(0, 500)), 100.0, 0.0),
        Step(failed(10), 100.0, 0.0, sampled_at=5),  # old sample and rate, error set
        Step(ok(15, sample(0, 1500)), 100.0, 0.0),  # delta over the 10 s since the last good
    ],
    "counter-vanished": [
        Step(ok(0, sample(0, 0, 0)), None),
        Step(ok(5, sample(None, 50, None)), None, None),
    ],
    "no-token-counters": [  # e.g. a TGI build without the histograms
        Step(ok(0, sample(None, None, None)), None),
        Step(ok(5, sample(None, None, None)), None, None),
    ],
    "same-time-result-ignored": [
        Step(ok(5, sample(0, 0)), None),
        Step(ok(5, sample(0, 999)), None, sampled_at=5),
        Step(ok(10, sample(0, 50)), 10.0, 0.0),
    ],
}


@pytest.mark.parametrize("steps", CASES.values(), ids=CASES.keys())
def test_rate_sequences(steps: list[Step]) -> None:
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING)]
    for i, step in enumerate(steps):
        (state,) = tracker.update("svc", eps, {A: step.result})
        assert state.tokens_per_s == pytest.approx(step.tokens_per_s), f"step {i}"
        assert state.preemptions_per_s == pytest.approx(step.preemptions_per_s), f"step {i}"
        want_at = step.result.at if step.sampled_at is None else step.sampled_at
        assert state.sampled_at == want_at, f"step {i}"
        assert state.error == step.result.error


def test_resets_are_counted() -> None:
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING)]
    for at, s in [(0, sample(10)), (5, sample(0)), (10, sample(5)), (15, sample(1, start=2.0))]:
        tracker.update("svc", eps, {A: ok(at, s)})
    assert tracker.resets("svc", A) == 2


def _hist(*counts: float) -> tuple[tuple[float, float], ...]:
    return tuple(zip((0.5, 1.0, 2.5, float("inf")), counts, strict=True))


# A restart shows in any one of these alone (vLLM's multiprocess mode exports no start time;
# an engine may export no token counters, or only the histograms an objective reads).
RESTART_SIGNS = {
    "start-time": (sample(start=1000.0), sample(start=1003.0)),
    "prompt-counter": (sample(10, None, None, None), sample(5, None, None, None)),
    "generation-counter": (sample(None, 10, None, None), sample(None, 5, None, None)),
    "preemption-counter": (sample(None, None, 10, None), sample(None, None, 5, None)),
    "ttft-histogram": (
        replace(sample(None, None, None, None), ttft_buckets=_hist(4, 8, 9, 9)),
        replace(sample(None, None, None, None), ttft_buckets=_hist(1, 1, 1, 1)),
    ),
    "itl-histogram": (
        replace(sample(None, None, None, None), itl_buckets=_hist(40, 80, 90, 90)),
        replace(sample(None, None, None, None), itl_buckets=_hist(1, 1, 1, 1)),
    ),
}


@pytest.mark.parametrize("before, after", RESTART_SIGNS.values(), ids=RESTART_SIGNS.keys())
def test_each_restart_sign_alone_counts_a_reset(before: EngineSample, after: EngineSample) -> None:
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING)]
    tracker.update("svc", eps, {A: ok(0, before)})
    tracker.update("svc", eps, {A: ok(5, before)})
    assert tracker.resets("svc", A) == 0  # the same counts again: no restart
    tracker.update("svc", eps, {A: ok(10, after)})
    assert tracker.resets("svc", A) == 1


def test_long_gap_gives_no_rate_when_capped() -> None:
    tracker = TargetTracker(max_rate_interval_s=30)
    eps = [Endpoint(A, TargetPhase.SERVING)]
    tracker.update("svc", eps, {A: ok(0, sample(0, 0))})
    (state,) = tracker.update("svc", eps, {A: ok(60, sample(0, 6000))})
    assert state.tokens_per_s is None
    (state,) = tracker.update("svc", eps, {A: ok(65, sample(0, 6500))})
    assert state.tokens_per_s == pytest.approx(100.0)


def test_never_scraped_target_has_no_data() -> None:
    (state,) = TargetTracker().update("svc", [Endpoint(A, TargetPhase.SERVING)], {})
    assert state.sample is None and state.sampled_at is None and state.error == "not scraped"
    assert not state.fresh(0.0, 30.0)


def test_removed_target_is_forgotten() -> None:
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING)]
    tracker.update("svc", eps, {A: ok(0, sample(0, 0))})
    tracker.update("svc", [], {})  # scaled away
    (state,) = tracker.update("svc", eps, {A: ok(5, sample(0, 500))})
    assert state.tokens_per_s is None  # a new pod at the old address: no stale baseline


def test_services_are_tracked_apart() -> None:
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING)]
    tracker.update("one", eps, {A: ok(0, sample(0, 0))})
    tracker.update("two", eps, {A: ok(0, sample(0, 1000))})
    (one,) = tracker.update("one", eps, {A: ok(5, sample(0, 500))})
    assert one.tokens_per_s == pytest.approx(100.0)
    tracker.forget_service("one")
    (two,) = tracker.update("two", eps, {A: ok(5, sample(0, 1500))})
    assert two.tokens_per_s == pytest.approx(100.0)


def test_staleness_through_aggregate() -> None:
    """A target whose scrapes fail goes stale: the service is incomplete, never idle."""
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING), Endpoint(B, TargetPhase.SERVING)]
    stale_after = 30.0
    tracker.update(
        "svc", eps, {A: ok(0, sample(0, 0, waiting=4)), B: ok(0, sample(0, 0, waiting=6))}
    )
    states = tracker.update("svc", eps, {A: ok(5, sample(0, 500, waiting=4)), B: failed(5, B)})
    load = aggregate("svc", states, now=5, stale_after_s=stale_after)
    assert load.complete and load.ready == 2 and load.waiting == 10  # B's data still fresh
    # B has no rate yet: it is assumed to carry A's 100 tok/s, neither 0 nor unknown.
    assert load.tokens_per_s == pytest.approx(200.0)

    states = tracker.update("svc", eps, {A: ok(40, sample(0, 4000, waiting=4)), B: failed(40, B)})
    load = aggregate("svc", states, now=40, stale_after_s=stale_after)
    assert not load.complete and not load.usable
    assert load.ready == 1 and load.unhealthy == 1
    assert "timeout" in load.reason and B in load.reason


def test_scrape_outcome_changes_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    """Failing and recovering targets are logged on the change, not on every cycle."""
    caplog.set_level(logging.INFO, logger="scaler.targets")
    tracker = TargetTracker()
    eps = [Endpoint(A, TargetPhase.SERVING)]
    tracker.update("svc", eps, {A: ok(0, sample(0, 0))})
    tracker.update("svc", eps, {A: failed(5, A)})
    tracker.update("svc", eps, {A: failed(10, A)})
    tracker.update("svc", eps, {A: ok(15, sample(0, 0))})
    tracker.update("svc", eps, {A: ok(20, sample(0, 0))})
    # The context is in the records' extra attributes (LogRecord does not declare them).
    lines = [
        (r.levelname, r.getMessage(), vars(r)["service"], vars(r)["target"]) for r in caplog.records
    ]
    assert [(lvl, msg.split(":")[0]) for lvl, msg, _, _ in lines] == [
        ("WARNING", "scrape failing"),
        ("INFO", "scrape recovered"),
    ]
    assert all((svc, tgt) == ("svc", A) for _, _, svc, tgt in lines)


def test_a_service_s_updates_keep_the_others_log_state(caplog: pytest.LogCaptureFixture) -> None:
    """Forgetting targets (one service's removed ones, or a removed service) touches no other
    service: a target still failing elsewhere is not announced again."""
    caplog.set_level(logging.INFO, logger="scaler.targets")
    tracker = TargetTracker()
    other = [Endpoint(B, TargetPhase.SERVING)]
    tracker.update("other", other, {B: failed(0, B)})
    tracker.update("svc", [Endpoint(A, TargetPhase.SERVING)], {A: ok(0, sample())})
    tracker.forget_service("gone")
    tracker.update("other", other, {B: failed(5, B)})
    assert [(vars(r)["service"], r.levelname) for r in caplog.records] == [("other", "WARNING")]
