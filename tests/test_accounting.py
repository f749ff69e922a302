"""Pool accounting: split table, fail-closed cases, reserve tracker, harvest meter."""

from __future__ import annotations

from typing import Any

import pytest

from scaler.config import Config, ResearchClass, parse_config
from scaler.core.accounting import Capacity, HarvestMeter, allocate, inference_gpus, split_pool
from scaler.core.decision import Decision, QueueRead, ServiceDecision, replica_room
from scaler.core.reserve import ReserveTracker


def make_cfg(
    research: list[dict[str, Any]],
    services: list[tuple[str, int]] = (("chat", 4),),  # type: ignore[assignment]
    *,
    reserve: int = 0,
    adaptive: dict[str, Any] | None = None,
) -> Config:
    pool: dict[str, Any] = {"name": "shared-h100", "capacity": {"gpus": 64}, "reserveGPUs": reserve}
    if adaptive is not None:
        pool["adaptiveReserve"] = adaptive
    return parse_config(
        {
            "pool": pool,
            "inference": [
                {"name": n, "gpusPerReplica": g, "targets": {"static": ["10.0.0.1:8000"]}}
                for n, g in services
            ],
            "research": research,
        }
    )


def sd(name: str, desired: int | None, current: int, *, fresh: bool = True) -> ServiceDecision:
    return ServiceDecision(
        name=name,
        namespace="serving",
        desired=desired,
        current=current,
        ready=current,
        starting=0,
        reason="test",
        fresh=fresh,
    )


def rc(name: str, gpus: int, **kw: Any) -> dict[str, Any]:
    return {"name": name, "gpusPerJob": gpus, **kw}


# (research classes, headroom GPUs, expected slots per class)
SPLIT_CASES = [
    pytest.param([rc("a", 1)], 10, {"a": 10}, id="single-class-takes-all"),
    pytest.param([rc("a", 1), rc("b", 1)], 10, {"a": 5, "b": 5}, id="equal-weights-halve"),
    pytest.param([rc("a", 1), rc("b", 1)], 11, {"a": 6, "b": 5}, id="odd-remainder-to-first"),
    pytest.param(
        [rc("a", 1, weight=3), rc("b", 1, weight=1)], 12, {"a": 9, "b": 3}, id="weights-3-to-1"
    ),
    pytest.param(
        [rc("a", 1, weight=2), rc("b", 1, weight=1)], 10, {"a": 7, "b": 3}, id="weights-remainder"
    ),
    pytest.param(
        [rc("a", 1, maxJobs=2), rc("b", 1)], 10, {"a": 2, "b": 8}, id="cap-leftover-to-other"
    ),
    pytest.param(
        [rc("a", 1, maxJobs=2), rc("b", 1, maxJobs=3)], 10, {"a": 2, "b": 3}, id="all-capped-idle"
    ),
    pytest.param([rc("a", 4)], 11, {"a": 2}, id="granularity-floors"),
    pytest.param([rc("a", 8), rc("b", 1)], 12, {"a": 1, "b": 4}, id="big-job-not-starved"),
    pytest.param([rc("a", 8), rc("b", 1)], 7, {"a": 0, "b": 7}, id="big-job-does-not-fit"),
    pytest.param([rc("a", 2), rc("b", 4)], 9, {"a": 2, "b": 1}, id="mixed-sizes-leftover-1"),
    pytest.param([rc("a", 3), rc("b", 3)], 2, {"a": 0, "b": 0}, id="nothing-fits"),
    pytest.param([rc("a", 1), rc("b", 1)], 0, {"a": 0, "b": 0}, id="no-headroom"),
    pytest.param([rc("a", 1, maxJobs=0), rc("b", 1)], 4, {"a": 0, "b": 4}, id="maxjobs-zero-off"),
    pytest.param(
        [rc("lo", 1), rc("hi", 1, priority=1)], 10, {"lo": 0, "hi": 10}, id="priority-first"
    ),
    pytest.param(
        [rc("lo", 1), rc("hi", 1, priority=1, maxJobs=4)],
        10,
        {"lo": 6, "hi": 4},
        id="priority-cap-spills-down",
    ),
    pytest.param(
        [rc("lo", 1), rc("hi", 8, priority=1)], 10, {"lo": 2, "hi": 1}, id="priority-remainder-down"
    ),
    pytest.param(
        [rc("lo", 1), rc("hi", 16, priority=1)], 10, {"lo": 10, "hi": 0}, id="priority-unfit-spills"
    ),
    pytest.param(
        [rc("a", 1, priority=2), rc("b", 1, priority=1, weight=5), rc("c", 1, priority=1)],
        7,
        {"a": 7, "b": 0, "c": 0},
        id="three-levels",
    ),
    pytest.param(
        [
            rc("a", 1, maxJobs=3, priority=2),
            rc("b", 1, priority=1, weight=5),
            rc("c", 1, priority=1),
        ],
        15,
        {"a": 3, "b": 10, "c": 2},
        id="three-levels-weights-in-level",
    ),
    # Equally served so far, the larger Job goes first (config order would pick "small"):
    # handing out the small ones first would leave no room for a big one at all.
    pytest.param([rc("small", 1), rc("big", 4)], 4, {"small": 0, "big": 1}, id="tie-to-larger-job"),
    pytest.param(
        [rc("small", 1), rc("big", 4)], 6, {"small": 2, "big": 1}, id="tie-to-larger-job-then-rest"
    ),
]


@pytest.mark.parametrize(("classes", "headroom", "expected"), SPLIT_CASES)
def test_allocate(classes: list[dict[str, Any]], headroom: int, expected: dict[str, int]) -> None:
    research = [ResearchClass.model_validate(c) for c in classes]
    got = allocate(research, headroom)
    assert got == expected
    assert sum(got[c.name] * c.gpusPerJob for c in research) <= headroom


@pytest.mark.parametrize(("classes", "headroom", "expected"), SPLIT_CASES)
def test_split_pool_reports_total_slots(
    classes: list[dict[str, Any]], headroom: int, expected: dict[str, int]
) -> None:
    # 64 GPUs − chat 3 replicas × 4 − reserve 2 − foreign 2 = 48; shrink capacity to `headroom`.
    cfg = make_cfg(classes, reserve=2)
    cap = Capacity(total_gpus=12 + 2 + 2 + headroom, foreign_gpus=2)
    split, research = split_pool(cfg, {"chat": sd("chat", 3, 3)}, cap, 2, ready_for_research=True)
    assert split.fail_closed is None
    assert (split.inference_gpus, split.reserve_gpus, split.foreign_gpus) == (12, 2, 2)
    assert split.headroom_gpus == headroom
    assert {n: d.slots for n, d in research.items()} == expected
    assert split.research_gpus == sum(d.slots * d.gpus_per_job for d in research.values())
    assert all(d.reason for d in research.values())


def test_split_reason_names_the_limit() -> None:
    cfg = make_cfg([rc("capped", 1, maxJobs=1), rc("big", 8), rc("off", 1, maxJobs=0)])
    split, research = split_pool(
        cfg, {"chat": sd("chat", 1, 1)}, Capacity(total_gpus=10), 0, ready_for_research=True
    )
    assert (split.capacity, split.headroom_gpus) == (10, 6)
    assert {n: d.name for n, d in research.items()} == {
        "capped": "capped",
        "big": "big",
        "off": "off",
    }
    assert research["capped"].slots == 1 and "capped at maxJobs 1" in research["capped"].reason
    assert research["big"].slots == 0 and "5 GPU(s) left < 8 per Job" in research["big"].reason
    assert research["off"].slots == 0 and research["off"].reason.endswith("; maxJobs is 0")


Q = {"urlFile": "/run/queue/url"}
# Headroom 60 (64 GPUs − chat 1 × 4): queue-fed class `q` (1 GPU, maxJobs 8) beside `b`
# (2 GPUs). (queue read of q, q's slots, b's slots, words in q's reason)
QUEUE_CASES = [
    pytest.param(QueueRead(3), 3, 28, "capped at 3 queued item(s)", id="fewer-items-than-slots"),
    pytest.param(QueueRead(0), 0, 30, "capped at 0 queued item(s)", id="empty-queue-no-job"),
    pytest.param(QueueRead(500), 8, 26, "capped at maxJobs 8", id="more-items-than-maxJobs"),
    pytest.param(QueueRead(8), 8, 26, "capped at maxJobs 8", id="as-many-items-as-maxJobs"),
    pytest.param(QueueRead(7), 7, 26, "capped at 7 queued item(s)", id="one-item-below-maxJobs"),
    pytest.param(
        QueueRead(None, "cannot reach Redis"),
        0,
        30,
        "work queue unread (cannot reach Redis)",
        id="unread-fails-closed",
    ),
    pytest.param(None, 0, 30, "work queue unread (not read yet)", id="never-read-fails-closed"),
]


@pytest.mark.parametrize(("read", "q_slots", "b_slots", "why"), QUEUE_CASES)
def test_a_queue_fed_class_gets_no_more_jobs_than_items_and_the_rest_goes_on(
    read: QueueRead | None, q_slots: int, b_slots: int, why: str
) -> None:
    cfg = make_cfg([rc("q", 1, maxJobs=8, queue=Q), rc("b", 2)])
    queued = {} if read is None else {"q": read}
    split, research = split_pool(
        cfg, {"chat": sd("chat", 1, 1)}, Capacity(64), 0, ready_for_research=True, queued=queued
    )
    assert (research["q"].slots, research["b"].slots) == (q_slots, b_slots)
    assert why in research["q"].reason
    assert research["q"].queued_items == (None if read is None else read.items)
    assert (research["q"].queue_error is None) == (read is not None and read.items is not None)
    assert research["b"].queued_items is None and research["b"].queue_error is None
    assert split.research_gpus == q_slots + 2 * b_slots


def test_a_class_without_a_queue_ignores_queue_reads() -> None:
    cfg = make_cfg([rc("a", 1, maxJobs=8)])
    _, research = split_pool(
        cfg,
        {"chat": sd("chat", 1, 1)},
        Capacity(64),
        0,
        ready_for_research=True,
        queued={"a": QueueRead(0)},
    )
    assert research["a"].slots == 8 and research["a"].queued_items is None


def test_a_failing_pool_still_shows_the_queue_read() -> None:
    cfg = make_cfg([rc("q", 1, queue=Q)])
    queued = {"q": QueueRead(4)}
    chat = {"chat": sd("chat", 1, 1)}
    split, research = split_pool(cfg, chat, None, 0, ready_for_research=True, queued=queued)
    assert split.fail_closed == "pool capacity unknown"
    assert research["q"].slots == 0 and research["q"].queued_items == 4


ONE_OF = "^a QueueRead has items or an error, not both or neither$"
WARNING = "^a QueueRead warning goes with items, an unread queue has its error$"


@pytest.mark.parametrize(
    ("items", "error", "warning", "message"),
    [
        (None, None, None, ONE_OF),
        (3, "boom", None, ONE_OF),
        (-1, None, None, "^negative item count -1$"),
        (None, "down", "stale", WARNING),
    ],
    ids=["neither", "both", "negative", "warning-without-items"],
)
def test_a_queue_read_is_items_or_an_error(
    items: int | None, error: str | None, warning: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        QueueRead(items, error, warning)


def test_a_queue_count_s_warning_reaches_the_decision() -> None:
    cfg = make_cfg([rc("q", 1, maxJobs=8, queue=Q)])
    queued = {"q": QueueRead(3, warning="credentials stale")}
    _, research = split_pool(
        cfg, {"chat": sd("chat", 1, 1)}, Capacity(64), 0, ready_for_research=True, queued=queued
    )
    assert (research["q"].slots, research["q"].queue_warning) == (3, "credentials stale")


INFERENCE_CASES = [
    pytest.param({"chat": sd("chat", 5, 3)}, 20, id="desired-above-current"),
    pytest.param({"chat": sd("chat", 2, 4)}, 16, id="scale-down-pending-counts-current"),
    pytest.param({"chat": sd("chat", None, 3)}, 12, id="no-desired-counts-current"),
    pytest.param({}, 0, id="no-decision-counts-nothing"),
    pytest.param(
        {"chat": sd("chat", 2, 2), "code": sd("code", 3, 1), "other": sd("other", 50, 50)},
        8 + 3 * 2,
        id="two-services-unconfigured-ignored",
    ),
]


@pytest.mark.parametrize(("decisions", "expected"), INFERENCE_CASES)
def test_inference_gpus(decisions: dict[str, ServiceDecision], expected: int) -> None:
    cfg = make_cfg([rc("a", 1)], services=[("chat", 4), ("code", 2)])
    assert inference_gpus(cfg, decisions) == expected


FRESH = {"chat": sd("chat", 2, 2), "code": sd("code", 1, 1)}
# (decisions, capacity, ready, the whole reason): an SRE greps for these words.
FAIL_CLOSED_CASES = [
    pytest.param(FRESH, None, True, "pool capacity unknown", id="capacity-unknown"),
    pytest.param(
        FRESH, Capacity(64), False, "no complete control cycle yet", id="before-first-cycle"
    ),
    pytest.param(
        {"chat": sd("chat", 2, 2, fresh=False), "code": sd("code", 1, 1)},
        Capacity(64),
        True,
        "service 'chat' data is stale or partial",
        id="stale-service",
    ),
    pytest.param(
        {"chat": sd("chat", None, 2), "code": sd("code", 1, 1)},
        Capacity(64),
        True,
        "service 'chat' has no data",
        id="desired-none",
    ),
    pytest.param(
        {"chat": sd("chat", 2, 2)},
        Capacity(64),
        True,
        "service 'code' has no decision",
        id="missing",
    ),
]


@pytest.mark.parametrize(("decisions", "capacity", "ready", "reason"), FAIL_CLOSED_CASES)
def test_fail_closed(
    decisions: dict[str, ServiceDecision], capacity: Capacity | None, ready: bool, reason: str
) -> None:
    cfg = make_cfg([rc("a", 1), rc("b", 2)], services=[("chat", 4), ("code", 2)])
    split, research = split_pool(cfg, decisions, capacity, 4, ready_for_research=ready)
    assert split.fail_closed == reason
    assert split.research_gpus == 0
    # What explain shows beside the reason is still what was counted: nothing made up for
    # an unknown capacity (no foreign GPUs, no headroom), the reserve as given.
    inf = inference_gpus(cfg, decisions)
    want = (None, inf, 4, 0, 0) if capacity is None else (64, inf, 4, 0, 64 - inf - 4)
    assert (
        split.capacity,
        split.inference_gpus,
        split.reserve_gpus,
        split.foreign_gpus,
        split.headroom_gpus,
    ) == want
    assert {n: (d.name, d.gpus_per_job) for n, d in research.items()} == {
        "a": ("a", 1),
        "b": ("b", 2),
    }
    for d in research.values():
        assert d.slots == 0
        assert d.reason == f"fail closed: {reason}"


def test_a_fail_closed_split_reports_the_foreign_gpus_it_counted() -> None:
    cfg = make_cfg([rc("a", 1)])
    split, _ = split_pool(
        cfg, {"chat": sd("chat", 2, 2)}, Capacity(64, foreign_gpus=6), 3, ready_for_research=False
    )
    assert (split.capacity, split.foreign_gpus, split.headroom_gpus) == (64, 6, 64 - 8 - 3 - 6)


def test_fresh_counterpart_of_fail_closed_lends() -> None:
    # The same inputs as the fail-closed table, healthy: research does get slots.
    cfg = make_cfg([rc("a", 1), rc("b", 2)], services=[("chat", 4), ("code", 2)])
    split, research = split_pool(cfg, FRESH, Capacity(64), 4, ready_for_research=True)
    assert split.fail_closed is None
    assert split.headroom_gpus == 64 - 10 - 4
    assert research["a"].slots + 2 * research["b"].slots == 50


def test_headroom_never_negative_and_foreign_subtracted() -> None:
    cfg = make_cfg([rc("a", 1)])
    split, research = split_pool(
        cfg, {"chat": sd("chat", 10, 10)}, Capacity(32, foreign_gpus=4), 4, ready_for_research=True
    )
    assert split.headroom_gpus == 0 and research["a"].slots == 0
    assert "no headroom" in research["a"].reason
    split, _ = split_pool(
        cfg, {"chat": sd("chat", 4, 4)}, Capacity(32, foreign_gpus=4), 4, ready_for_research=True
    )
    assert split.headroom_gpus == 32 - 16 - 4 - 4


@pytest.mark.parametrize(
    ("free", "gpus", "room"),
    [
        pytest.param((), 4, 0, id="no-nodes"),
        pytest.param((8, 4), 4, 3, id="whole-blocks"),
        pytest.param((3, 3, 2), 4, 0, id="eight-free-none-on-one-node"),
        pytest.param((7, 5, 0), 4, 2, id="remainders-wasted"),
        pytest.param((3, 3, 2), 1, 8, id="one-gpu-replicas-fit-anywhere"),
        pytest.param((1, 1, 0), 1, 2, id="one-free-gpu-is-room-for-one"),
        pytest.param((8,), 8, 1, id="a-whole-node"),
    ],
)
def test_replica_room(free: tuple[int, ...], gpus: int, room: int) -> None:
    assert replica_room(free, gpus) == room


def test_before_the_first_cycle_the_decision_is_empty_and_dated_never() -> None:
    d = Decision.initial()
    assert (d.seq, d.wall_time, dict(d.services), dict(d.research)) == (0, 0.0, {}, {})
    assert d.config is None


def test_replica_room_needs_a_replica_size() -> None:
    with pytest.raises(ValueError, match="gpus_per_replica"):
        replica_room((8,), 0)


@pytest.mark.parametrize("ready", [True, False], ids=["lending", "fail-closed"])
def test_split_carries_the_free_gpus_by_node(ready: bool) -> None:
    cfg = make_cfg([rc("a", 1)])
    cap = Capacity(16, free_by_node=(3, 3))
    split, _ = split_pool(cfg, {"chat": sd("chat", 1, 1)}, cap, 4, ready_for_research=ready)
    assert split.free_by_node == (3, 3)
    assert (split.fail_closed is None) == ready
    split, _ = split_pool(
        cfg, {"chat": sd("chat", 1, 1)}, Capacity(16), 4, ready_for_research=ready
    )
    assert split.free_by_node is None


def test_negative_reserve_rejected() -> None:
    with pytest.raises(ValueError, match="reserve_gpus"):
        split_pool(make_cfg([rc("a", 1)]), {}, Capacity(8), -1, ready_for_research=True)


@pytest.mark.parametrize(
    "make, match",
    [
        pytest.param(lambda: Capacity(-1), "negative GPU count", id="negative-total"),
        pytest.param(
            lambda: Capacity(8, foreign_gpus=-1), "negative GPU count", id="negative-foreign"
        ),
        pytest.param(
            lambda: HarvestMeter(max_interval_seconds=0),
            "^max_interval_seconds must be > 0$",
            id="meter-zero-interval",
        ),
        pytest.param(
            lambda: HarvestMeter(max_interval_seconds=-5),
            "^max_interval_seconds must be > 0$",
            id="meter-negative-interval",
        ),
        pytest.param(
            lambda: HarvestMeter().observe(-1, 0.0),
            "research_gpus must be >= 0, got -1",
            id="meter-negative-gpus",
        ),
    ],
)
def test_impossible_inputs_are_refused(make: Any, match: str) -> None:
    # Each check on its own: a negative count would lend GPUs that do not exist.
    with pytest.raises(ValueError, match=match):
        make()


# --- the forecast's withholding ----------------------------------------------------------

LONG, MID, SHORT = 3600.0, 1800.0, 600.0
# Headroom 10 (14 GPUs − chat 1 × 4). (classes, withhold per class, slots after, GPUs withheld)
WITHHOLD_CASES = [
    pytest.param(
        [rc("a", 1, checkpointIntervalSeconds=SHORT)],
        {"a": 10},
        {"a": 0},
        10,
        id="all-headroom-needed-back-lends-nothing",
    ),
    pytest.param(
        [rc("a", 1, checkpointIntervalSeconds=SHORT)],
        {"a": 25},
        {"a": 0},
        10,
        id="more-than-the-headroom-needed-back",
    ),
    pytest.param(
        [rc("a", 2, checkpointIntervalSeconds=SHORT)],
        {"a": 5},
        {"a": 2},
        6,
        id="whole-jobs-in-what-stays-free",
    ),
    pytest.param(
        # long (priority 2) takes 6 of 10; short may lend 5 in all, which long already exceeds.
        [
            rc("long", 1, checkpointIntervalSeconds=LONG, priority=2, maxJobs=6),
            rc("short", 1, checkpointIntervalSeconds=SHORT),
        ],
        {"short": 5},
        {"long": 6, "short": 0},
        4,
        id="longer-jobs-past-the-shorter-limit-leave-it-none",
    ),
    pytest.param(
        # short's limit (6 GPUs) counts long's and mid's Jobs together: 3 + 3 = 6, none left.
        [
            rc("long", 1, checkpointIntervalSeconds=LONG, priority=3, maxJobs=3),
            rc("mid", 1, checkpointIntervalSeconds=MID, priority=2, maxJobs=3),
            rc("short", 1, checkpointIntervalSeconds=SHORT),
        ],
        {"short": 4},
        {"long": 3, "mid": 3, "short": 0},
        4,
        id="the-shortest-limit-counts-every-longer-class",
    ),
]


@pytest.mark.parametrize(("classes", "withhold", "slots", "withheld"), WITHHOLD_CASES)
def test_the_forecast_withholds_whole_jobs_longest_interval_first(
    classes: list[dict[str, Any]], withhold: dict[str, int], slots: dict[str, int], withheld: int
) -> None:
    cfg = make_cfg(classes)
    split, research = split_pool(
        cfg, {"chat": sd("chat", 1, 1)}, Capacity(14), 0, ready_for_research=True, withhold=withhold
    )
    assert split.headroom_gpus == 10
    got = {n: d.slots for n, d in research.items()}
    assert got == slots and all(type(v) is int for v in got.values())
    assert split.forecast_withheld_gpus == withheld
    assert split.research_gpus == sum(d.slots * d.gpus_per_job for d in research.values())
    for d in research.values():
        assert type(d.withheld_slots) is int
        if d.withheld_slots:
            assert f"forecast withholds {d.withheld_slots} Job(s): inference needs " in d.reason
            assert f"{withhold[d.name]} more GPU(s)" in d.reason


# --- harvest meter ---------------------------------------------------------------------


def test_harvest_meter_integrates_gpu_hours() -> None:
    h = HarvestMeter(max_interval_seconds=60)
    assert h.observe(8, 0.0) == 0.0  # first sample: nothing held yet
    for t in range(5, 3601, 5):  # 8 GPUs for one hour, observed every 5 s
        h.observe(8, float(t))
    assert h.gpu_hours == pytest.approx(8.0)
    h.observe(0, 3605.0)  # the 8 GPUs were held until 3605
    h.observe(0, 7200.0)
    assert h.gpu_hours == pytest.approx(8.0 + 8 * 5 / 3600)


def test_harvest_meter_default_gap_is_a_minute_and_any_positive_cap_is_accepted() -> None:
    h = HarvestMeter()
    h.observe(6, 0.0)
    assert h.observe(6, 600.0) == pytest.approx(6 * 60 / 3600)
    short = HarvestMeter(max_interval_seconds=0.5)  # a cap below a second is still a cap
    short.observe(3600, 0.0)
    assert short.observe(0, 10.0) == pytest.approx(3600 * 0.5 / 3600)


def test_harvest_meter_caps_gaps_and_ignores_backwards_clock() -> None:
    h = HarvestMeter(max_interval_seconds=60)
    h.observe(10, 0.0)
    h.observe(10, 3600.0)  # loop stalled an hour: count only 60 s
    assert h.gpu_hours == pytest.approx(10 * 60 / 3600)
    h.observe(10, 3500.0)  # clock went backwards: nothing added
    assert h.gpu_hours == pytest.approx(10 * 60 / 3600)
    h.observe(10, 3610.0)
    assert h.gpu_hours == pytest.approx(10 * 70 / 3600)
    with pytest.raises(ValueError):
        h.observe(-1, 3700.0)


# --- reserve tracker -------------------------------------------------------------------


def tracker(**adaptive: Any) -> ReserveTracker:
    return ReserveTracker(make_cfg([rc("a", 1)], reserve=4, adaptive=adaptive).pool)


def test_reserve_floor_only_when_disabled() -> None:
    t = tracker(enabled=False)
    t.observe(0.0, 0)
    t.observe(10.0, 40)
    assert t.reserve(10.0).gpus == 4


# (samples (t, gpus), now, expected adaptive part) with window 3600 s, lead 300 s, max 16
RESERVE_CASES = [
    pytest.param([(0, 8)], 0, 0, id="single-sample"),
    pytest.param([(0, 8), (100, 16)], 100, 8, id="rise-within-lead"),
    pytest.param([(0, 8), (100, 16), (200, 12)], 200, 8, id="rise-then-fall-kept"),
    pytest.param([(0, 8), (400, 16)], 400, 0, id="rise-slower-than-lead"),
    pytest.param([(0, 8), (200, 12), (400, 16)], 400, 4, id="stepwise-rise-per-lead"),
    pytest.param([(0, 16), (100, 8)], 100, 0, id="fall-is-not-a-rise"),
    pytest.param([(0, 0), (60, 40)], 60, 16, id="capped-at-max"),
    pytest.param([(0, 8), (100, 16), (3000, 16)], 3000, 8, id="still-in-window"),
    pytest.param([(0, 8), (100, 16), (3000, 16)], 3701, 0, id="rise-left-the-window"),
    pytest.param([(0, 8), (300, 16)], 300, 8, id="exactly-lead-apart"),
]

# (samples (t, held GPUs, GPUs the load needed), now, expected adaptive part); same settings.
# The rise is what the load needed beyond what inference held within one lead time.
RESERVE_NEED_CASES = [
    pytest.param([(0, 8, 8), (100, 16, 16)], 100, 8, id="held-follows-need"),
    # The forecast raised 8 -> 16 ahead (the load still needed 8), the load came 600 s later.
    pytest.param([(0, 8, 8), (100, 16, 8), (700, 16, 16)], 700, 0, id="raised-ahead-keeps-none"),
    # ... and the raise itself is no rise either: the load did not need it.
    pytest.param([(0, 8, 8), (100, 16, 8)], 100, 0, id="forecast-raise-is-not-a-rise"),
    # A scale-down window held 16 while the load needed 4; the load comes back to 16.
    pytest.param([(0, 16, 4), (100, 16, 16)], 100, 0, id="window-held-covers-the-return"),
    # Held 8 of a need of 4, then the load needs 20 (held 20): 12 beyond what was held.
    pytest.param([(0, 8, 4), (100, 20, 20)], 100, 12, id="rise-beyond-held"),
    # A need above what is held (maxReplicas, a step cap) counts as held.
    pytest.param([(0, 8, 8), (100, 12, 40)], 100, 4, id="need-above-held-counts-as-held"),
]


@pytest.mark.parametrize(("samples", "now", "expected"), RESERVE_CASES)
def test_adaptive_reserve(samples: list[tuple[float, int]], now: float, expected: int) -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    for ts, g in samples:
        t.observe(float(ts), g)
    assert t.adaptive_gpus(float(now)) == expected
    assert t.reserve(float(now)).gpus == 4 + expected


@pytest.mark.parametrize(("samples", "now", "expected"), RESERVE_NEED_CASES)
def test_adaptive_reserve_counts_rises_beyond_what_was_held(
    samples: list[tuple[float, int, int]], now: float, expected: int
) -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    for ts, held, need in samples:
        t.observe(float(ts), held, need)
    assert t.adaptive_gpus(float(now)) == expected


def test_adaptive_reserve_matches_brute_force() -> None:
    import random

    rnd = random.Random(7)
    t = tracker(enabled=True, windowSeconds=600, leadTimeSeconds=60, maxGPUs=1000)
    hist: list[tuple[float, int, int]] = []
    now = 0.0
    for _ in range(400):
        now += rnd.choice([1.0, 5.0, 5.0, 17.0])
        g = max(0, (hist[-1][1] if hist else 20) + rnd.randint(-6, 6))
        n = max(0, g - rnd.choice([0, 0, 2, 8]))  # the load needed at most what was held
        t.observe(now, g, n)
        hist.append((now, g, n))
        live = [(ts, v, w) for ts, v, w in hist if ts >= now - 600]
        want = max(
            [0]
            + [wj - vi for ti, vi, _ in live for tj, _, wj in live if ti <= tj and tj - ti <= 60]
        )
        assert t.adaptive_gpus(now) == want


# (rise samples (t, gpus), then reserve calls (now, rising, expected adaptive part)) with
# window 3600 s, lead 300 s, max 16: the rise 8 -> 16 at 100 s leaves the window at 3700 s.
HOLD_CASES = [
    pytest.param(
        [(100, True, 8), (3701, True, 8), (3800, True, 8), (3805, False, 0)],
        id="held-while-rising-then-released",
    ),
    pytest.param([(100, True, 8), (3701, False, 0)], id="not-rising-falls-with-the-window"),
    pytest.param(
        [(100, True, 8), (3701, False, 0), (3705, True, 0)],
        id="holds-the-last-level-not-an-old-peak",
    ),
    pytest.param([(50, False, 0), (100, True, 8)], id="rising-never-lowers-a-rise"),
]


@pytest.mark.parametrize("calls", HOLD_CASES)
def test_the_adaptive_reserve_does_not_fall_while_a_smooth_rate_rises(
    calls: list[tuple[float, bool, int]],
) -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    t.observe(0.0, 8)
    for now, rising, expected in calls:
        if now >= 100:
            t.observe(max(100.0, float(now)), 16)
        held = expected - t.adaptive_gpus(float(now))
        assert t.reserve(float(now), rising=rising) == (4 + expected, held), now


def test_a_held_reserve_follows_a_reload_and_each_copy_keeps_its_own() -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    t.observe(0.0, 8)
    t.observe(100.0, 20)
    assert t.reserve(100.0).gpus == 4 + 12
    twin = t.copy()
    assert twin.reserve(3701.0, rising=True).gpus == 4 + 12  # the copy carries the held level
    assert t.reserve(3701.0).gpus == 4  # ... and lowering the original leaves the copy alone
    assert twin.reserve(3702.0, rising=True).gpus == 4 + 12
    twin.reconfigure(
        make_cfg([rc("a", 1)], reserve=2, adaptive={"maxGPUs": 5, "enabled": True}).pool
    )
    assert twin.reserve(3703.0, rising=True).gpus == 2 + 5  # a lowered maxGPUs caps what is held
    twin.reconfigure(make_cfg([rc("a", 1)], reserve=2, adaptive={"enabled": False}).pool)
    assert twin.reserve(3704.0, rising=True).gpus == 2  # off: the floor only
    twin.reconfigure(make_cfg([rc("a", 1)], reserve=2, adaptive={"enabled": True}).pool)
    assert twin.reserve(3705.0, rising=True).gpus == 2  # back on: nothing held from before


def test_a_fresh_tracker_holds_nothing_while_rising() -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    assert t.reserve(0.0, rising=True) == (4, 0)


def test_turned_off_and_on_without_a_cycle_between_holds_nothing_from_before() -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    t.observe(0.0, 8)
    t.observe(100.0, 20)
    assert t.reserve(100.0, rising=True).gpus == 4 + 12
    t.reconfigure(make_cfg([rc("a", 1)], reserve=4, adaptive={"enabled": False}).pool)
    t.reconfigure(make_cfg([rc("a", 1)], reserve=4, adaptive={"enabled": True}).pool)
    assert t.reserve(101.0, rising=True) == (4, 0)


def test_two_samples_at_the_same_instant_both_count() -> None:
    # A coarse clock can stamp two cycles alike: the later one is no backwards step.
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    t.observe(0.0, 16)
    t.observe(100.0, 8)
    t.observe(100.0, 20)
    assert t.adaptive_gpus(100.0) == 12


def test_reserve_ignores_backwards_clock_and_reconfigures() -> None:
    t = tracker(enabled=True, windowSeconds=3600, leadTimeSeconds=300, maxGPUs=16)
    t.observe(100.0, 8)
    t.observe(50.0, 0)  # dropped: would fake a rise
    t.observe(150.0, 8)
    assert t.adaptive_gpus(150.0) == 0
    t.observe(200.0, 20)
    assert t.adaptive_gpus(200.0) == 12
    t.reconfigure(make_cfg([rc("a", 1)], reserve=1, adaptive={"maxGPUs": 5, "enabled": True}).pool)
    assert t.reserve(200.0).gpus == 1 + 5
    with pytest.raises(ValueError, match=r"GPU counts must be >= 0, got -1, None"):
        t.observe(300.0, -1)
    with pytest.raises(ValueError, match=r"GPU counts must be >= 0, got 8, -1"):
        t.observe(300.0, 8, -1)
