"""Snapshots: published from the control thread, awaited on the serving loop."""

from __future__ import annotations

import asyncio
import threading

from scaler.core.decision import Decision
from scaler.serve.snapshot import Snapshots


def decision(seq: int) -> Decision:
    return Decision(seq=seq, wall_time=float(seq))


async def test_publish_from_another_thread_wakes_the_waiter() -> None:
    snaps = Snapshots(decision(1))
    waiter = asyncio.create_task(snaps.wait_newer(1))
    await asyncio.sleep(0.01)  # the waiter is registered and parked
    t = threading.Thread(target=snaps.publish, args=(decision(2),))
    t.start()
    got = await asyncio.wait_for(waiter, 5)
    t.join()
    assert got.seq == 2


async def test_already_newer_returns_at_once() -> None:
    snaps = Snapshots(decision(5))
    assert (await asyncio.wait_for(snaps.wait_newer(3), 1)).seq == 5


async def test_cancelled_waiters_are_not_kept() -> None:
    """A dropped StreamIsActive must not leave its future behind until the next publish."""
    snaps = Snapshots(decision(1))
    tasks = [asyncio.create_task(snaps.wait_newer(1)) for _ in range(50)]
    await asyncio.sleep(0.01)
    assert len(snaps._waiters) == 50
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert len(snaps._waiters) == 0


def test_publish_without_a_running_loop_wakes_waiters_on_theirs() -> None:
    snaps = Snapshots(decision(1))
    loop = asyncio.new_event_loop()
    try:
        fut = loop.create_task(snaps.wait_newer(1))
        loop.run_until_complete(asyncio.sleep(0.01))
        snaps.publish(decision(2))  # this thread runs no loop at all
        assert loop.run_until_complete(asyncio.wait_for(fut, 5)).seq == 2
    finally:
        loop.close()
