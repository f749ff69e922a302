"""The research work queue on Redis: one queue per research class, leases, completion.

Every state change is one Lua script (scaler/research/scripts.py), hence atomic; this class
only shapes arguments and replies. It does not retry: a caller that retries a call after a
lost reply passes the same token, and the scripts answer a repeated call as the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from scaler.research import scripts
from scaler.research.model import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_LOST,
    MAX_SUBMITTER,
    InputError,
    Item,
    check_class_name,
    new_item_id,
)

DEFAULT_PREFIX = "gps"
_MAX_ERROR = 1000  # characters of a command's last error kept on the item


class UnknownClassError(InputError):
    pass


@dataclass(frozen=True, slots=True)
class Lease:
    item: Item
    token: str
    worker: str

    @property
    def attempt(self) -> int:
        return self.item.attempts


@dataclass(frozen=True, slots=True)
class TakeResult:
    status: str  # ok | empty | full | lost
    lease: Lease | None = None
    live_leases: int = 0


@dataclass(frozen=True, slots=True)
class FinishResult:
    status: str  # ok | duplicate | lost | missing
    detail: str = ""  # ok: the item's new state; duplicate: why; lost: the item's state


@dataclass(frozen=True, slots=True)
class Snapshot:
    classes: list[str]  # registered classes and classes that have items, sorted
    registered: frozenset[str]
    items: list[Item]


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


class WorkQueue:
    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.redis = client
        self.prefix = prefix
        self._submit = client.register_script(scripts.SUBMIT)
        self._take = client.register_script(scripts.TAKE)
        self._heartbeat = client.register_script(scripts.HEARTBEAT)
        self._finish = client.register_script(scripts.FINISH)
        self._cancel = client.register_script(scripts.CANCEL)
        self._reap = client.register_script(scripts.REAP)

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    # ---------------------------------------------------------------- registry (admin)

    def registered_classes(self) -> set[str]:
        return set(self.redis.smembers(self.key("classes")))  # type: ignore[arg-type]

    def update_classes(
        self,
        *,
        add: Iterable[str] = (),
        remove: Iterable[str] = (),
        replace: Iterable[str] | None = None,
    ) -> set[str]:
        """Change the registry in one transaction; returns the registry afterwards.

        Removing a class only stops new submissions: its items stay and workers finish them.
        """
        add_l = [check_class_name(c) for c in add]
        rem_l = [check_class_name(c) for c in remove]
        rep_l = None if replace is None else [check_class_name(c) for c in replace]
        k = self.key("classes")
        with self.redis.pipeline(transaction=True) as p:
            if rep_l is not None:
                p.delete(k)
                if rep_l:
                    p.sadd(k, *rep_l)
            if add_l:
                p.sadd(k, *add_l)
            if rem_l:
                p.srem(k, *rem_l)
            p.smembers(k)
            out = p.execute()
        return set(out[-1])

    # ---------------------------------------------------------------- researcher

    def submit(
        self,
        research_class: str,
        params: Mapping[str, str],
        *,
        submitter: str = "",
        gpus: int = 1,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_lost: int = DEFAULT_MAX_LOST,
    ) -> str:
        """Queue one item; returns its id. One script: the item is all there or not at all."""
        check_class_name(research_class)
        if not 1 <= max_attempts <= 1000:
            raise InputError(f"--max-attempts must be 1..1000, got {max_attempts}")
        if not 1 <= max_lost <= 1000:
            raise InputError(f"--max-lost must be 1..1000, got {max_lost}")
        if not 1 <= gpus <= 1024:
            raise InputError(f"--gpus must be 1..1024, got {gpus}")
        if len(submitter) > MAX_SUBMITTER or any(ord(c) < 32 for c in submitter):
            raise InputError(f"--submitter must be printable and at most {MAX_SUBMITTER} chars")
        for _ in range(5):
            item_id = new_item_id()
            r = self._submit(
                args=[
                    self.prefix,
                    item_id,
                    research_class,
                    json.dumps(dict(params), sort_keys=True),
                    submitter,
                    gpus,
                    max_attempts,
                    max_lost,
                ]
            )
            if r == "ok":
                return item_id
            if r == "unknown-class":
                raise UnknownClassError(self._unknown(research_class))
        raise RuntimeError("could not find a free item id in 5 tries")

    def _unknown(self, research_class: str) -> str:
        known = ", ".join(sorted(self.registered_classes())) or "none registered"
        return f"unknown research class {research_class!r} (known: {known})"

    def require_class(self, research_class: str) -> None:
        check_class_name(research_class)
        if not self.redis.sismember(self.key("classes"), research_class):
            raise UnknownClassError(self._unknown(research_class))

    def cancel(self, item_id: str) -> str:
        """'cancelled' (was waiting), 'cancelling' (running: its worker stops it at the
        next heartbeat), 'missing', or 'already:<state>' (done, dead or cancelled)."""
        return str(self._cancel(args=[self.prefix, item_id]))

    def get(self, item_id: str) -> Item | None:
        h = self.redis.hgetall(self.key("item", item_id))
        return Item.from_hash(h) if h else None  # type: ignore[arg-type]

    def reap(self, classes: Iterable[str]) -> int:
        """Requeue (or dead-letter) items whose lease expired. Any worker or CLI runs this."""
        cl = list(classes)
        return int(self._reap(args=[self.prefix, *cl])) if cl else 0

    def known_classes(self) -> list[str]:
        """Registered classes and classes that ever had an item, sorted."""
        return sorted(self.redis.sunion(self.key("classes"), self.key("seen-classes")))  # type: ignore[arg-type]

    def snapshot(self, only: str | None = None) -> Snapshot:
        """Every item of every class (or of `only`), read in one MULTI: consistent counts."""
        registered = frozenset(self.registered_classes())
        seen: set[str] = set(self.redis.smembers(self.key("seen-classes")))  # type: ignore[arg-type]
        classes = sorted(registered | seen) if only is None else [only]
        with self.redis.pipeline(transaction=True) as p:
            for c in classes:
                p.zrange(self.key("items", c), 0, -1)
            id_lists: list[list[str]] = p.execute()
        ids = [i for lst in id_lists for i in lst]
        with self.redis.pipeline(transaction=True) as p:
            for i in ids:
                p.hgetall(self.key("item", i))
            hashes: list[dict[str, str]] = p.execute()
        items = [Item.from_hash(h) for h in hashes if h]
        return Snapshot(classes=classes, registered=registered, items=items)

    def dead_letters(self, research_class: str) -> list[str]:
        return list(self.redis.lrange(self.key("dead", research_class), 0, -1))  # type: ignore[arg-type]

    def queued_ids(self, research_class: str) -> list[str]:
        return list(self.redis.lrange(self.key("q", research_class), 0, -1))  # type: ignore[arg-type]

    def live_leases(self, research_class: str) -> int:
        return int(self.redis.zcard(self.key("leases", research_class)))

    def completion(self, item_id: str) -> dict[str, str]:
        return dict(self.redis.hgetall(self.key("completion", item_id)))  # type: ignore[arg-type]

    def events(self, count: int | None = None) -> list[dict[str, str]]:
        rows: Any = self.redis.xrange(self.key("events"), count=count)
        return [dict(fields) for _, fields in rows]

    # ---------------------------------------------------------------- worker

    def take(
        self,
        research_class: str,
        *,
        token: str,
        worker: str,
        lease_ms: int,
        slots: int | None,
        gpus: int = 0,
    ) -> TakeResult:
        """Lease the next item of the class if its live leases < slots (None: no limit).

        Reaps the class's expired leases first, in the same script. gpus=0: the item's own.
        """
        r = self._take(
            args=[
                self.prefix,
                research_class,
                -1 if slots is None else max(0, slots),
                lease_ms,
                token,
                worker,
                gpus,
            ]
        )
        status = str(r[0])
        if status == "ok":
            return TakeResult("ok", Lease(Item.from_hash(_pairs(r[1])), token, worker))
        return TakeResult(status, None, int(r[1]) if len(r) > 1 else 0)

    def heartbeat(self, lease: Lease, lease_ms: int) -> str:
        """'ok' (extended), 'cancel' (extended, but cancel was requested) or 'lost'."""
        return str(self._heartbeat(args=[self.prefix, lease.item.id, lease.token, lease_ms]))

    def finish(
        self, lease: Lease, outcome: str, *, error: str = "", checkpoint: str = ""
    ) -> FinishResult:
        r = self._finish(
            args=[
                self.prefix,
                lease.item.id,
                lease.token,
                outcome,
                error[:_MAX_ERROR],
                checkpoint,
                lease.worker,
            ]
        )
        return FinishResult(str(r[0]), str(r[1]) if len(r) > 1 else "")
