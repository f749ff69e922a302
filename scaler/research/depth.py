"""The scaler's read of the work queue: each queue-fed class's outstanding items.

A class with `queue` in the config gets no more slots than it has items waiting or leased
(core.accounting), so KEDA starts no Job for an empty queue. This module is the I/O: per
class, LLEN `<prefix>:q:<class>` and ZCARD `<prefix>:leases:<class>` in one MULTI (an item
moving from the list to the leases between two separate reads would count 0 or 2 times).
Expired leases still count: the next worker's take requeues them (scripts.TAKE).

A read that fails gives the error, never a 0: the class then gets 0 slots because its
queue is unknown (fail closed), and explain says why.

The URL comes from a file (`queue.urlFile`, a mounted Secret, read each cycle) or from the
workers' Secret through the Kubernetes API (`queue.secret`, through an injected getter,
re-read every SECRET_REFRESH_S; a failed re-read keeps the credentials last read, since
the count itself still comes live from Redis, is logged, and is tried again sooner, backing
off from SECRET_RETRY_S to SECRET_REFRESH_S).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import redis

from scaler.config import Config, ResearchQueue
from scaler.core.decision import QueueRead
from scaler.research.model import InputError
from scaler.research.redisconn import connect, describe

log = logging.getLogger("scaler.research.depth")

# How often the workers' Secret is read again (s): a rotated password is used within this,
# about the lag of a Secret mounted by the kubelet.
SECRET_REFRESH_S = 60.0
# A failed read is tried again after this (s), doubling with each failure up to
# SECRET_REFRESH_S: a Role or Secret that stays missing costs one API call a minute, not one
# per cycle, and one put right is read within a minute.
SECRET_RETRY_S = 5.0

# (namespace, name, timeout_s) -> the Secret's data, decoded; raises with a one-line reason.
SecretGetter = Callable[[str, str, float], Mapping[str, str]]


class QueueReader(Protocol):
    async def read(self, cfg: Config) -> Mapping[str, QueueRead]:
        """One read per research class with a `queue`, keyed by class name."""
        ...


class RedisQueueDepth:
    """Reads the queues on Redis: one blocking client per URL, the classes read
    concurrently from worker threads, each within its timeout. URLs and clients are
    resolved in the caller's thread, so the threads share no state."""

    def __init__(
        self,
        client_for: Callable[[str, float], redis.Redis] | None = None,
        *,
        secrets: SecretGetter | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_secret_read: Callable[[bool], None] = lambda ok: None,
    ) -> None:
        self._client_for = client_for or (lambda url, t: connect(url, timeout_s=t))
        self._clients: dict[tuple[str, float], redis.Redis] = {}
        self._errors: dict[str, str] = {}  # class -> last error logged (once per change)
        self._secrets = secrets
        self._clock = clock
        self._on_secret_read = on_secret_read  # each read's outcome (a metric)
        self._secret: dict[tuple[str, str], _SecretRead] = {}  # by (namespace, name)

    async def read(self, cfg: Config) -> dict[str, QueueRead]:
        queues = [(c.name, c.queue) for c in cfg.research if c.queue is not None]
        await self._refresh_secrets(cfg)
        plans: list[_Plan | QueueRead] = []
        used: set[tuple[str, float]] = set()
        for name, q in queues:
            try:
                key = (self._url(q), q.timeout_s(cfg.scrape))
                used.add(key)
                if key not in self._clients:
                    self._clients[key] = self._client_for(*key)
                _check_database(self._clients[key], q)
            except InputError as e:
                plans.append(QueueRead(None, str(e)))
                continue
            plans.append(_Plan(self._clients[key], key[0], q.prefix, name))
        # A reload or a rotated Secret leaves clients no class uses: close them.
        for key in set(self._clients) - used:
            self._clients.pop(key).close()
        reads = await asyncio.gather(*(_read(p) for p in plans))
        out = {name: self._stale(q, r) for (name, q), r in zip(queues, reads, strict=True)}
        for name, r in out.items():
            self._log(name, r)
        return out

    async def _refresh_secrets(self, cfg: Config) -> None:
        """Reads the workers' Secrets not read within SECRET_REFRESH_S, concurrently, off
        this thread (the API call blocks)."""
        wanted: dict[tuple[str, str], float] = {}
        for c in cfg.research:
            if c.queue is not None and c.queue.secret is not None:
                k = _key(c.queue)
                wanted[k] = max(wanted.get(k, 0.0), c.queue.timeout_s(cfg.scrape))
        for k in set(self._secret) - set(wanted):
            del self._secret[k]
        now = self._clock()
        due = [k for k in wanted if k not in self._secret or now >= self._secret[k].due]
        if not due:
            return
        got = await asyncio.gather(
            *(asyncio.to_thread(self._get_secret, k, wanted[k]) for k in due)
        )
        for k, (data, error) in zip(due, got, strict=True):
            self._on_secret_read(data is not None)
            s = self._secret.setdefault(k, _SecretRead())
            if data is not None:
                if s.error is not None:
                    log.info("Secret %s/%s read again", *k)
                s.data, s.error, s.failures, s.read_at = data, None, 0, now
                s.due = now + SECRET_REFRESH_S
                continue
            if error != s.error:
                kept = " (keeping the credentials read before)" if s.data is not None else ""
                log.warning("work queue credentials unread: %s%s", error, kept)
            s.failures += 1
            s.error = error
            s.due = now + min(SECRET_RETRY_S * 2 ** (s.failures - 1), SECRET_REFRESH_S)

    def _stale(self, q: ResearchQueue, r: QueueRead) -> QueueRead:
        """A count read with credentials whose Secret no longer reads says so (explain)."""
        s = None if q.secret is None else self._secret.get(_key(q))
        if r.items is None or s is None or s.error is None:
            return r
        age = self._clock() - s.read_at
        return replace(
            r,
            warning=f"read {age:.0f} s ago, reading them again fails: {s.error} (counted "
            "with the credentials read then, until the password rotates)",
        )

    def _get_secret(
        self, k: tuple[str, str], timeout_s: float
    ) -> tuple[Mapping[str, str] | None, str]:
        if self._secrets is None:
            return None, f"Secret {k[0]}/{k[1]}: no Kubernetes API client (queue.secret)"
        try:
            return dict(self._secrets(k[0], k[1], timeout_s)), ""
        except Exception as e:  # the getter's reason, whatever failed: never a crash here
            return None, str(e) or f"Secret {k[0]}/{k[1]}: {type(e).__name__}"

    def _url(self, q: ResearchQueue) -> str:
        if q.urlFile is not None:
            return _file_url(q.urlFile)
        assert q.secret is not None
        k = _key(q)
        s = self._secret.get(k)
        if s is None or s.data is None:
            raise InputError((s and s.error) or f"Secret {k[0]}/{k[1]}: not read yet")
        return _secret_url(q, s.data)

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


@dataclass(slots=True)
class _SecretRead:
    """One Secret: the data last read (kept through failed re-reads) and when, the clock
    time of the next read, and the failure since the last good read."""

    data: Mapping[str, str] | None = None
    read_at: float = 0.0  # clock time of the last good read
    due: float = 0.0
    error: str | None = None
    failures: int = 0


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


def _key(q: ResearchQueue) -> tuple[str, str]:
    """The workers' Secret of a `queue.secret` class: (namespace, name)."""
    assert q.secret is not None
    return q.secret.namespace, q.secret.name


def _file_url(path: str) -> str:
    """The URL from `urlFile`, read every time: a rotated Secret takes effect on its own."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"queue.urlFile {path}: cannot read: {why}") from None
    if not text:
        raise InputError(f"queue.urlFile {path} is empty")
    return text


def _secret_url(q: ResearchQueue, data: Mapping[str, str]) -> str:
    """The workers' URL: their Secret's `urlKey`, else built as the chart builds it for them
    (redis://[user]:password@address/database), the password quoted."""
    assert q.secret is not None
    where = f"Secret {q.secret.namespace}/{q.secret.name}"

    def value(key: str) -> str:
        # As the workers get it (an env var from the key), so no stripping but the URL's.
        v = data.get(key, "")
        if not v.strip():
            raise InputError(f"{where} has no key {key!r} (or it is empty)")
        return v

    if q.secret.urlKey is not None:
        return value(q.secret.urlKey).strip()
    user = value(q.secret.usernameKey) if q.secret.usernameKey is not None else ""
    password = value(q.secret.passwordKey)
    quote = urllib.parse.quote
    return (
        f"redis://{quote(user, safe='')}:{quote(password, safe='')}@{q.address}/{q.database or 0}"
    )


def _check_database(client: redis.Redis, q: ResearchQueue) -> None:
    """The URL's database against the workers' (`queue.database`), as the client parsed it
    (path `/N` or `?db=N`, default 0). Another database holds no items of theirs. A URL
    built from the Secret's password is built on `queue.database`: nothing to check."""
    if q.database is None or (q.secret is not None and q.secret.urlKey is None):
        return
    source = f"queue.urlFile {q.urlFile}" if q.urlFile is not None else "queue.secret's URL"
    db = int(client.connection_pool.connection_kwargs.get("db", 0) or 0)
    if db != q.database:
        raise InputError(
            f"{source}: the URL selects database {db}, the workers' queue "
            f"is in database {q.database} (queue.database; the chart's "
            "researchQueue.redis.databaseIndex)"
        )
