"""`gpu-pool-scaler explain` rendering of the pool: where the free GPUs are."""

from __future__ import annotations

from dataclasses import replace

import pytest

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
