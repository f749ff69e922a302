"""Property tests of the pool split: the invariants hold for every input, not just the table."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scaler.config import Config, ResearchQueue, parse_config
from scaler.core.accounting import Capacity, split_pool
from scaler.core.decision import QueueRead, ServiceDecision
from tests.support.fuzz import budget

research_class = st.fixed_dictionaries(
    {
        "gpusPerJob": st.integers(1, 8),
        "weight": st.sampled_from([0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0]),
        "priority": st.integers(-1, 2),
        "maxJobs": st.integers(0, 64),
    }
)
service = st.fixed_dictionaries(
    {
        "gpusPerReplica": st.integers(1, 8),
        "desired": st.none() | st.integers(0, 20),
        "current": st.integers(0, 20),
        "fresh": st.booleans(),
    }
)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    classes = draw(st.lists(research_class, min_size=1, max_size=6))
    services = draw(st.lists(service, min_size=0, max_size=4))
    # Mostly healthy inputs, so the split itself (not only fail-closed) gets exercised.
    healthy = draw(st.booleans())
    if healthy:
        for s in services:
            s["fresh"] = True
            if s["desired"] is None:
                s["desired"] = s["current"]
    capacity = draw(
        st.builds(Capacity, st.integers(0, 512), st.integers(0, 64))
        if healthy
        else st.none() | st.builds(Capacity, st.integers(0, 512), st.integers(0, 64))
    )
    return {
        "classes": classes,
        "services": services,
        "capacity": capacity,
        "reserve": draw(st.integers(0, 32)),
        "ready": True if healthy else draw(st.booleans()),
        "drop_decision": False if healthy else draw(st.booleans()),
    }


def build(sc: dict[str, Any]) -> tuple[Config, dict[str, ServiceDecision]]:
    cfg = parse_config(
        {
            "pool": {"name": "p", "capacity": {"gpus": 1}},
            "inference": [
                {
                    "name": f"s{i}",
                    "gpusPerReplica": s["gpusPerReplica"],
                    "targets": {"static": ["10.0.0.1:8000"]},
                }
                for i, s in enumerate(sc["services"])
            ],
            "research": [{"name": f"r{i}", **c} for i, c in enumerate(sc["classes"])],
        }
    )
    decisions = {
        f"s{i}": ServiceDecision(
            f"s{i}", "ns", s["desired"], s["current"], s["current"], 0, "t", fresh=s["fresh"]
        )
        for i, s in enumerate(sc["services"])
    }
    if sc["drop_decision"] and decisions:
        decisions.pop(next(iter(decisions)))
    return cfg, decisions


@budget(3000)
@given(scenarios())
def test_split_invariants(sc: dict[str, Any]) -> None:
    cfg, decisions = build(sc)
    cap: Capacity | None = sc["capacity"]
    split, research = split_pool(cfg, decisions, cap, sc["reserve"], ready_for_research=sc["ready"])

    # Independent recomputation of inference GPUs (desired None counts current).
    inf = 0
    for i, s in enumerate(sc["services"]):
        d = decisions.get(f"s{i}")
        if d is not None:
            reps = d.current if d.desired is None else max(d.desired, d.current)
            inf += reps * s["gpusPerReplica"]
    assert split.inference_gpus == inf

    assert set(research) == {c.name for c in cfg.research}
    slots = {n: d.slots for n, d in research.items()}
    assert all(v >= 0 for v in slots.values())
    lent = sum(slots[c.name] * c.gpusPerJob for c in cfg.research)
    assert split.research_gpus == lent
    assert 0 <= lent <= split.headroom_gpus

    # THE invariant: what inference holds plus what research may start fits in the pool.
    if lent > 0:
        assert cap is not None
        assert inf + lent <= cap.total_gpus - sc["reserve"] - cap.foreign_gpus

    # Fail closed exactly when an input is unknown or not fresh.
    unsafe = (
        cap is None
        or not sc["ready"]
        or any(
            (d := decisions.get(s.name)) is None or d.desired is None or not d.fresh
            for s in cfg.inference
        )
    )
    assert (split.fail_closed is not None) == unsafe
    if unsafe:
        assert lent == 0
        return

    assert cap is not None
    assert split.headroom_gpus == max(0, cap.total_gpus - inf - sc["reserve"] - cap.foreign_gpus)
    left = split.headroom_gpus - lent
    for c in cfg.research:
        assert slots[c.name] <= c.maxJobs
        # Work-conserving: nothing left that a class below its cap could still use.
        if slots[c.name] < c.maxJobs:
            assert c.gpusPerJob > left
            # Strict priority: lower levels only got what this class could not use.
            lower = sum(
                slots[o.name] * o.gpusPerJob for o in cfg.research if o.priority < c.priority
            )
            assert lower + left < c.gpusPerJob
    # Weighted fairness within a level: a class's last Job was handed out while it was the
    # least served per weight, so it is at most one Job ahead of any uncapped class whose
    # Jobs are no bigger (such a class could have taken that Job instead).
    for a in cfg.research:
        for b in cfg.research:
            if a is b or a.priority != b.priority or slots[a.name] == 0:
                continue
            if slots[b.name] < b.maxJobs and b.gpusPerJob <= a.gpusPerJob:
                before_last = (slots[a.name] - 1) * a.gpusPerJob / a.weight
                assert before_last <= slots[b.name] * b.gpusPerJob / b.weight + 1e-9


queue_read = (
    st.none()
    | st.builds(QueueRead, st.integers(0, 40))
    | st.just(QueueRead(None, "down"))  # the read failed
)


@budget(1000)
@given(scenarios(), st.data())
def test_a_queue_read_acts_as_a_lower_max_jobs(sc: dict[str, Any], data: st.DataObject) -> None:
    """Per class, None: no queue; else its queue read (items, or an error). The split equals
    the one where each queue-fed class's maxJobs is min(maxJobs, items) (0 when unread), so
    every invariant of test_split_invariants holds with queues too. (Not claimed: that no
    other class loses a slot. Packing serves larger Jobs first, so a GPU freed by an empty
    queue can let a 2-GPU Job in where a 1-GPU Job of another class had fit.)"""
    reads: list[QueueRead | None] = [data.draw(queue_read) for _ in sc["classes"]]
    cfg, decisions = build(sc)
    queue = ResearchQueue(urlFile="/run/url")
    queued_cfg = cfg.model_copy(
        update={
            "research": [
                c if r is None else c.model_copy(update={"queue": queue})
                for c, r in zip(cfg.research, reads, strict=True)
            ]
        }
    )
    queued = {c.name: r for c, r in zip(cfg.research, reads, strict=True) if r is not None}
    args = (decisions, sc["capacity"], sc["reserve"])
    split, research = split_pool(queued_cfg, *args, ready_for_research=sc["ready"], queued=queued)

    lowered = cfg.model_copy(
        update={
            "research": [
                c if r is None else c.model_copy(update={"maxJobs": min(c.maxJobs, r.items or 0)})
                for c, r in zip(cfg.research, reads, strict=True)
            ]
        }
    )
    split_low, research_low = split_pool(lowered, *args, ready_for_research=sc["ready"])
    assert {n: d.slots for n, d in research.items()} == {
        n: d.slots for n, d in research_low.items()
    }
    assert split.research_gpus == split_low.research_gpus

    for c, r in zip(cfg.research, reads, strict=True):
        got = research[c.name]
        if r is None:
            assert got.queued_items is None and got.queue_error is None
        elif r.items is None:
            assert got.slots == 0 and got.queue_error == "down"
        else:
            assert got.slots <= r.items and got.queued_items == r.items
