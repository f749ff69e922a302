"""The latest Decision, published atomically; streams wait for the next one.

The control loop publishes from its own thread (scaler/app.py); readers are gRPC
handlers on the serving thread's event loop. Reading is one reference load, and every
waiter is woken on the event loop it waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from scaler.core.decision import Decision


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # a cancelled waiter (stream dropped) is already done
        fut.set_result(None)


class Snapshots:
    """Holds the latest Decision. Readers never block writers; one reference swap."""

    def __init__(self, initial: Decision | None = None) -> None:
        self._latest = initial or Decision.initial()
        self._lock = threading.Lock()  # guards _waiters only, never held across an await
        self._waiters: dict[asyncio.Future[None], asyncio.AbstractEventLoop] = {}

    def latest(self) -> Decision:
        return self._latest

    def publish(self, decision: Decision) -> None:
        """Safe from any thread: swap the reference, then wake each waiter on its loop."""
        self._latest = decision
        with self._lock:
            waiters, self._waiters = self._waiters, {}
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for fut, loop in waiters.items():
            if loop is here:
                _wake(fut)
            else:
                with contextlib.suppress(RuntimeError):  # that loop is closed: no one waits
                    loop.call_soon_threadsafe(_wake, fut)

    async def wait_newer(self, seq: int) -> Decision:
        """Return the first decision with a sequence number greater than `seq`."""
        loop = asyncio.get_running_loop()
        while self._latest.seq <= seq:
            fut: asyncio.Future[None] = loop.create_future()
            with self._lock:
                self._waiters[fut] = loop
            # Re-check after registering: a publish between the test and the registration
            # has already taken the waiter list and would never wake this future.
            if self._latest.seq > seq:
                with self._lock:
                    self._waiters.pop(fut, None)
                break
            try:
                await fut
            finally:  # also when cancelled (stream dropped): do not keep it until a publish
                with self._lock:
                    self._waiters.pop(fut, None)
        return self._latest
