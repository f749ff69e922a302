"""The latest Decision, published atomically; streams wait for the next one."""

from __future__ import annotations

import asyncio

from scaler.decision import Decision


class Snapshots:
    """Holds the latest Decision. Readers never block writers; one reference swap."""

    def __init__(self, initial: Decision | None = None) -> None:
        self._latest = initial or Decision.initial()
        self._changed = asyncio.Event()

    def latest(self) -> Decision:
        return self._latest

    def publish(self, decision: Decision) -> None:
        self._latest = decision
        # Wake every waiter, then arm a fresh event for the next publish.
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    async def wait_newer(self, seq: int) -> Decision:
        """Return the first decision with a sequence number greater than `seq`."""
        while self._latest.seq <= seq:
            await self._changed.wait()
        return self._latest
