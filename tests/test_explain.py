"""`gpu-pool-scaler explain` rendering of the pool: where the free GPUs are."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scaler.config import parse_config
from scaler.core.accounting import Capacity, split_pool
from scaler.core.decision import QueueRead
from scaler.explain import render
from tests.support.decisions import decision, svc

FRAGMENTED = "fragmented"


@pytest.mark.parametrize(
    ("free", "lines", "fragmented"),
    [
        pytest.param(
            (3, 3, 2),
            [
                "free on the nodes: 8 GPU(s) (3, 3, 2 per node, largest first)",
                "room for 0 more replica(s) of chat (4 GPUs on one node): fragmented, 8 free "
                "GPUs would hold 2",
            ],
            True,
            id="spread",
        ),
        pytest.param(
            (8, 0, 0),
            [
                "free on the nodes: 8 GPU(s) (8, 0, 0 per node, largest first)",
                "room for 2 more replica(s) of chat (4 GPUs on one node)",
            ],
            False,
            id="packed",
        ),
        pytest.param(
            tuple(range(10, 0, -1)),
            ["free on the nodes: 55 GPU(s) (10, 9, 8, 7, 6, 5, 4, 3, … per node, largest first)"],
            True,
            id="many-nodes-shortened",
        ),
    ],
)
def test_explain_shows_the_free_gpus_and_the_replicas_they_hold(
    free: tuple[int, ...], lines: list[str], fragmented: bool
) -> None:
    d = decision(1, svc("chat", 3))
    assert d.pool is not None
    text = render(replace(d, pool=replace(d.pool, free_by_node=free)))
    for line in lines:
        assert line in text
    assert (FRAGMENTED in text) == fragmented
    assert "free on the nodes" not in render(d)  # pods not watched: nothing claimed


def test_explain_says_when_the_adaptive_reserve_holds_for_a_rising_rate() -> None:
    d = decision(1, svc("chat", 3))
    assert d.pool is not None
    pool = replace(d.pool, reserve_held_gpus=8, reserve_held_for=("chat", "code"))
    held = render(replace(d, pool=pool))
    assert (
        "the reserve keeps 8 GPU(s) its window no longer asks while the smooth rate of "
        "chat, code rises"
    ) in held
    assert "its window no longer asks" not in render(d)


QUEUE_CFG = parse_config(
    {
        "pool": {"name": "shared-h100", "capacity": {"gpus": 64}},
        "inference": [{"name": "chat", "gpusPerReplica": 4, "targets": {"static": ["x:1"]}}],
        "research": [{"name": "eval", "gpusPerJob": 1, "queue": {"urlFile": "/run/url"}}],
    }
)
ERROR = "cannot reach Redis at redis://:***@redis:6379/0"


# (pool capacity known, the eval line's reason words, the queue's own line or None)
UNREAD_CASES = [
    # The class's reason names the error: said once, not again on its own line.
    pytest.param(True, f"work queue unread ({ERROR})", None, id="unread-said-in-the-reason"),
    # Failing closed for the pool, the reason is the pool's: the queue's error has its line.
    pytest.param(
        False,
        "fail closed: pool capacity unknown",
        f"  work queue unread: {ERROR} (0 slots until it is read)",
        id="pool-fails-closed-queue-line-kept",
    ),
]


def explain_queue(read: QueueRead, capacity: Capacity | None) -> str:
    """`explain` of QUEUE_CFG with class eval's queue read as `read`, through the real split."""
    _, research = split_pool(
        QUEUE_CFG,
        {"chat": svc("chat", 2)},
        capacity,
        0,
        ready_for_research=True,
        queued={"eval": read},
    )
    return render(replace(decision(1, svc("chat", 2)), config=QUEUE_CFG, research=research))


@pytest.mark.parametrize(("capacity", "reason", "line"), UNREAD_CASES)
def test_explain_names_an_unread_queue_once(capacity: bool, reason: str, line: str | None) -> None:
    text = explain_queue(QueueRead(None, ERROR), Capacity(64) if capacity else None)
    assert text.count(ERROR) == 1, text
    (eval_line,) = [ln for ln in text.splitlines() if ln.startswith("research eval:")]
    assert reason in eval_line
    assert (line in text.splitlines()) if line is not None else "  work queue unread:" not in text


# (the queue's read, the lines under the eval line that name the queue)
QUEUE_LINE_CASES = [
    pytest.param(
        QueueRead(3),
        [
            "  work queue: 3 item(s) waiting or leased; no more Jobs than that (an empty queue "
            "starts none)"
        ],
        id="counted",
    ),
    pytest.param(
        QueueRead(3, warning="read 65 s ago, reading them again fails: forbidden"),
        [
            "  work queue: 3 item(s) waiting or leased; no more Jobs than that (an empty "
            "queue starts none)",
            "  work queue credentials: read 65 s ago, reading them again fails: forbidden",
        ],
        id="counted-with-credentials-that-no-longer-read",
    ),
]


@pytest.mark.parametrize(("read", "lines"), QUEUE_LINE_CASES)
def test_explain_says_what_a_queue_count_rests_on(read: QueueRead, lines: list[str]) -> None:
    text = explain_queue(read, Capacity(64))
    assert [ln for ln in text.splitlines() if ln.startswith("  work queue")] == lines
