"""The scaler's read of the work queue: each queue-fed class's outstanding items.

A class with `queue` in the config gets no more slots than it has items waiting or leased
(core.accounting), so KEDA starts no Job for an empty queue. This module is the I/O: per
class, LLEN `<prefix>:q:<class>` and ZCARD `<prefix>:leases:<class>` in one MULTI (an item
moving from the list to the leases between two separate reads would count 0 or 2 times).
Expired leases still count: the next worker's take requeues them (scripts.TAKE).

A read that fails gives the error, never a 0: the class then gets 0 slots because its
queue is unknown (fail closed), and explain says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import redis

from scaler.config import Config, ResearchQueue
from scaler.core.decision import QueueRead
from scaler.research.model import InputError
from scaler.research.redisconn import connect, describe

log = logging.getLogger("scaler.research.depth")


class QueueReader(Protocol):
    async def read(self, cfg: Config) -> Mapping[str, QueueRead]:
        """One read per research class with a `queue`, keyed by class name."""
        ...


class RedisQueueDepth:
    """Reads the queues on Redis: one blocking client per URL, the classes read
    concurrently from worker threads, each within its timeout. URLs and clients are
    resolved in the caller's thread, so the threads share no state."""

    def __init__(self, client_for: Callable[[str, float], redis.Redis] | None = None) -> None:
        self._client_for = client_for or (lambda url, t: connect(url, timeout_s=t))
        self._clients: dict[tuple[str, float], redis.Redis] = {}
        self._errors: dict[str, str] = {}  # class -> last error logged (once per change)

    async def read(self, cfg: Config) -> dict[str, QueueRead]:
        classes = [c for c in cfg.research if c.queue is not None]
        plans: list[_Plan | QueueRead] = []
        used: set[tuple[str, float]] = set()
        for c in classes:
            assert c.queue is not None
            try:
                key = (_url(c.queue), c.queue.timeout_s(cfg.scrape))
                used.add(key)
                if key not in self._clients:
                    self._clients[key] = self._client_for(*key)
                _check_database(self._clients[key], c.queue)
            except InputError as e:
                plans.append(QueueRead(None, str(e)))
                continue
            plans.append(_Plan(self._clients[key], key[0], c.queue.prefix, c.name))
        # A reload or a rotated Secret leaves clients no class uses: close them.
        for key in set(self._clients) - used:
            self._clients.pop(key).close()
        reads = await asyncio.gather(*(_read(p) for p in plans))
        out = {c.name: r for c, r in zip(classes, reads, strict=True)}
        for name, r in out.items():
            self._log(name, r)
        return out

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _log(self, name: str, r: QueueRead) -> None:
        before = self._errors.get(name)
        if r.error is not None and r.error != before:
            log.warning(
                "work queue unread, class gets 0 slots: %s", r.error, extra={"research_class": name}
            )
            self._errors[name] = r.error
        elif r.error is None and before is not None:
            log.info("work queue read again (%s items)", r.items, extra={"research_class": name})
            del self._errors[name]


@dataclass(frozen=True, slots=True)
class _Plan:
    client: redis.Redis
    url: str  # for error messages (redacted there)
    prefix: str
    research_class: str


async def _read(plan: _Plan | QueueRead) -> QueueRead:
    if isinstance(plan, QueueRead):  # no URL or no client: the reason, as it is
        return plan
    return await asyncio.to_thread(_count, plan)


def _count(p: _Plan) -> QueueRead:
    """Items waiting + leased, in one MULTI (blocking; runs in a worker thread)."""
    try:
        pipe = p.client.pipeline(transaction=True)
        pipe.llen(f"{p.prefix}:q:{p.research_class}")
        pipe.zcard(f"{p.prefix}:leases:{p.research_class}")
        waiting, leased = pipe.execute()
        return QueueRead(int(waiting) + int(leased))
    except (redis.exceptions.RedisError, OSError, ValueError, TypeError) as e:
        return QueueRead(None, describe(e, p.url))


def _url(q: ResearchQueue) -> str:
    """The URL from `urlFile`, read every time: a rotated Secret takes effect on its own."""
    try:
        text = Path(q.urlFile).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"queue.urlFile {q.urlFile}: cannot read: {why}") from None
    if not text:
        raise InputError(f"queue.urlFile {q.urlFile} is empty")
    return text


def _check_database(client: redis.Redis, q: ResearchQueue) -> None:
    """The URL's database against the workers' (`queue.database`), as the client parsed it
    (path `/N` or `?db=N`, default 0). Another database holds no items of theirs."""
    if q.database is None:
        return
    db = int(client.connection_pool.connection_kwargs.get("db", 0) or 0)
    if db != q.database:
        raise InputError(
            f"queue.urlFile {q.urlFile}: the URL selects database {db}, the workers' queue "
            f"is in database {q.database} (queue.database; the chart's "
            "researchQueue.redis.databaseIndex)"
        )
