"""Work-queue semantics on a real redis-server: leases, expiry, completion, dead letters, cancel.

Scenarios are tables of steps over one item; workers are named and each `take` gives the
worker a fresh lease token, as a real worker process would.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaler.research import model
from scaler.research.model import InputError, Item
from scaler.research.queue import Lease, UnknownClassError, WorkQueue
from scaler.research.redisconn import connect
from tests.support.redisserver import RedisServer, registered_queue, running_redis

LEASE_MS = 300
EXPIRE_S = 0.45  # sleep past a lease that nobody renews


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path, persistent=True)


@pytest.fixture
def queue(redis_server: RedisServer) -> Iterator[WorkQueue]:
    yield from registered_queue(redis_server, ["eval", "train"])


# ---------------------------------------------------------------------- scenarios

Step = tuple[Any, ...]


def run_steps(q: WorkQueue, item_id: str, steps: list[Step]) -> None:
    leases: dict[str, Lease] = {}
    for n, step in enumerate(steps):
        op, *rest = step
        where = f"step {n} {step!r}"
        if op == "take":
            worker, want, *opt = rest
            slots = opt[0] if opt else None
            r = q.take("eval", token=f"{worker}-{n}", worker=worker, lease_ms=LEASE_MS, slots=slots)
            assert r.status == want, where
            if r.lease is not None:
                assert r.lease.item.id == item_id, where
                leases[worker] = r.lease
        elif op == "heartbeat":
            worker, want = rest
            assert q.heartbeat(leases[worker], LEASE_MS) == want, where
        elif op == "finish":
            worker, outcome, want, *detail = rest
            r2 = q.finish(leases[worker], outcome, error="boom" if outcome == "failed" else "")
            assert r2.status == want, f"{where}: {r2}"
            if detail:
                assert r2.detail.startswith(detail[0]), f"{where}: {r2}"
        elif op == "sleep":
            time.sleep(rest[0])
        elif op == "reap":
            assert q.reap(["eval"]) == rest[0], where
        elif op == "cancel":
            assert q.cancel(item_id) == rest[0], where
        elif op == "item":
            it = q.get(item_id)
            assert it is not None
            for k, v in rest[0].items():
                assert getattr(it, k) == v, f"{where}: {k}={getattr(it, k)!r}, want {v!r}"
        elif op == "leases":
            assert q.live_leases("eval") == rest[0], where
        elif op == "queued":
            assert q.queued_ids("eval") == ([item_id] if rest[0] else []), where
        elif op == "dead":
            assert q.dead_letters("eval") == ([item_id] if rest[0] else []), where
        elif op == "completion":
            assert q.completion(item_id).get("worker", "") == rest[0], where
        else:
            raise AssertionError(f"unknown op {op}")


SCENARIOS = [
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("take", "B", "empty"),
            ("sleep", 0.15),
            ("heartbeat", "A", "ok"),
            ("sleep", 0.2),  # past the first deadline: the heartbeat moved it
            ("heartbeat", "A", "ok"),
            ("take", "B", "empty"),
            ("item", {"state": "running", "attempts": 1, "worker": "A"}),
            ("leases", 1),
        ],
        id="lease-hidden-from-others-while-heartbeating",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("sleep", EXPIRE_S),
            ("take", "B", "ok"),  # the take reaps A's expired lease first
            ("item", {"attempts": 2, "lost": 1, "failures": 0, "preemptions": 0, "worker": "B"}),
            ("heartbeat", "A", "lost"),
            ("finish", "B", "done", "ok", "done"),
            ("item", {"state": "done", "last_outcome": "done"}),
        ],
        id="expired-lease-requeued-counted-as-lost-not-failure",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("sleep", EXPIRE_S),
            ("take", "B", "ok"),
            ("finish", "A", "done", "duplicate", "lease lost"),  # late: B owns it now
            ("finish", "B", "done", "ok", "done"),
            ("finish", "A", "done", "duplicate", "already completed"),  # and again, later
            ("completion", "B"),
            ("item", {"state": "done", "duplicates_refused": 2}),
        ],
        id="late-duplicate-completion-refused-before-and-after-the-real-one",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("finish", "A", "done", "ok", "done"),
            ("finish", "A", "done", "ok", "done"),  # a retry after a lost reply
            ("item", {"state": "done", "duplicates_refused": 0}),
            ("completion", "A"),
        ],
        id="completion-retried-by-its-own-worker-is-idempotent",
    ),
    pytest.param(
        {"max_attempts": 2},
        [
            ("take", "A", "ok"),
            ("finish", "A", "failed", "ok", "requeued"),
            ("item", {"failures": 1, "state": "requeued", "last_error": "boom"}),
            ("take", "B", "ok"),
            ("finish", "B", "failed", "ok", "dead"),
            ("item", {"failures": 2, "attempts": 2, "state": "dead", "last_error": "boom"}),
            ("dead", True),
            ("take", "C", "empty"),
        ],
        id="dead-letter-after-max-attempts-failures",
    ),
    pytest.param(
        {"max_attempts": 1},
        [
            ("take", "A", "ok"),
            ("finish", "A", "preempted", "ok", "requeued"),
            ("item", {"preemptions": 1, "failures": 0, "state": "requeued"}),
            ("take", "B", "ok"),
            ("finish", "B", "preempted", "ok", "requeued"),
            ("take", "C", "ok"),
            ("item", {"attempts": 3, "preemptions": 2, "failures": 0}),
            ("finish", "C", "done", "ok", "done"),
        ],
        id="preemption-is-not-a-failure-even-with-max-attempts-1",
    ),
    pytest.param(
        {"max_lost": 2},
        [
            ("take", "A", "ok"),
            ("sleep", EXPIRE_S),
            ("take", "B", "ok"),
            ("sleep", EXPIRE_S),
            ("reap", 1),
            ("item", {"state": "dead", "lost": 2, "failures": 0}),
            ("dead", True),
            ("queued", False),
        ],
        id="node-loss-cap-dead-letters-a-poison-item",
    ),
    pytest.param(
        {},
        [
            ("cancel", "cancelled"),
            ("queued", False),
            ("take", "A", "empty"),
            ("item", {"state": "cancelled", "attempts": 0}),
            ("cancel", "already:cancelled"),
        ],
        id="cancel-queued-item-removes-it",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("cancel", "cancelling"),
            ("item", {"state": "running", "cancel_requested": True}),
            ("heartbeat", "A", "cancel"),
            ("finish", "A", "cancelled", "ok", "cancelled"),
            ("item", {"state": "cancelled"}),
            ("leases", 0),
        ],
        id="cancel-running-item-seen-at-next-heartbeat",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("cancel", "cancelling"),
            ("sleep", EXPIRE_S),
            ("reap", 1),
            ("item", {"state": "cancelled", "lost": 1}),
            ("queued", False),
        ],
        id="cancel-running-item-whose-worker-died",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("cancel", "cancelling"),
            ("finish", "A", "done", "ok", "done"),  # finished before noticing: done wins
            ("cancel", "already:done"),
        ],
        id="cancel-loses-to-a-completed-item",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "full", 0),
            ("take", "A", "ok", 1),
            ("take", "B", "full", 1),
            ("finish", "A", "preempted", "ok", "requeued"),
            ("take", "B", "ok", 1),
        ],
        id="take-only-while-live-leases-below-slots",
    ),
    pytest.param(
        {},
        [
            ("take", "A", "ok"),
            ("sleep", EXPIRE_S),
            ("heartbeat", "A", "ok"),  # expired but not reaped: still A's (the token decides)
            ("take", "B", "empty"),
            ("finish", "A", "done", "ok", "done"),
        ],
        id="expired-but-unreaped-lease-still-belongs-to-its-worker",
    ),
]


@pytest.mark.parametrize(("opts", "steps"), SCENARIOS)
def test_queue_semantics(queue: WorkQueue, opts: dict[str, int], steps: list[Step]) -> None:
    item_id = queue.submit("eval", {"K": "v"}, submitter="t", **opts)
    run_steps(queue, item_id, steps)


# ---------------------------------------------------------------------- other properties


def test_take_retried_with_same_token_returns_the_same_lease(queue: WorkQueue) -> None:
    a = queue.submit("eval", {})
    queue.submit("eval", {})
    r1 = queue.take("eval", token="t1", worker="w", lease_ms=LEASE_MS, slots=None)
    r2 = queue.take("eval", token="t1", worker="w", lease_ms=LEASE_MS, slots=None)
    assert r1.lease is not None and r2.lease is not None
    assert r1.lease.item.id == r2.lease.item.id == a
    assert queue.live_leases("eval") == 1
    assert len(queue.queued_ids("eval")) == 1


def test_preempted_item_resumes_before_new_work_failed_item_goes_last(queue: WorkQueue) -> None:
    ids = [queue.submit("eval", {"N": str(i)}) for i in range(3)]
    r = queue.take("eval", token="a", worker="w", lease_ms=LEASE_MS, slots=None)
    assert r.lease is not None and r.lease.item.id == ids[0]
    queue.finish(r.lease, "preempted")
    assert queue.queued_ids("eval") == [ids[0], ids[1], ids[2]]
    r = queue.take("eval", token="b", worker="w", lease_ms=LEASE_MS, slots=None)
    assert r.lease is not None
    queue.finish(r.lease, "failed", error="x")
    assert queue.queued_ids("eval") == [ids[1], ids[2], ids[0]]


def test_gpu_seconds_are_wall_time_times_gpus(queue: WorkQueue) -> None:
    item_id = queue.submit("eval", {}, gpus=2)
    r = queue.take("eval", token="a", worker="w", lease_ms=5000, slots=None)
    assert r.lease is not None
    time.sleep(0.2)
    queue.finish(r.lease, "preempted")
    first = queue.get(item_id)
    assert first is not None and 390 <= first.gpu_ms <= 700, first
    # A worker flag overrides the item's GPUs.
    r = queue.take("eval", token="b", worker="w", lease_ms=5000, slots=None, gpus=4)
    assert r.lease is not None
    time.sleep(0.1)
    queue.finish(r.lease, "done")
    it2 = queue.get(item_id)
    assert it2 is not None and first.gpu_ms + 390 <= it2.gpu_ms <= first.gpu_ms + 700


def test_concurrent_takes_lease_each_item_once(queue: WorkQueue, redis_server: RedisServer) -> None:
    ids = {queue.submit("eval", {}) for _ in range(120)}
    taken: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        q = WorkQueue(connect(redis_server.url))
        i = 0
        while True:
            i += 1
            r = q.take("eval", token=f"{n}-{i}", worker=str(n), lease_ms=60000, slots=None)
            if r.lease is None:
                assert r.status == "empty"
                return
            with lock:
                taken.append(r.lease.item.id)
            assert q.finish(r.lease, "done").status == "ok"

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted(ids)
    assert all(queue.completion(i) for i in ids)


def test_state_survives_a_redis_crash(queue: WorkQueue, redis_server: RedisServer) -> None:
    item_id = queue.submit("eval", {"A": "1"})
    r = queue.take("eval", token="a", worker="w", lease_ms=60000, slots=None)
    assert r.lease is not None
    redis_server.restart(kill=True)  # SIGKILL: only what appendfsync-always wrote survives
    q2 = WorkQueue(connect(redis_server.url))
    assert q2.heartbeat(r.lease, 60000) == "ok"  # scripts reload themselves (NOSCRIPT)
    assert q2.finish(r.lease, "done").status == "ok"
    it = q2.get(item_id)
    assert it is not None and it.state == "done" and it.params == {"A": "1"}


def test_submit_refuses_unknown_class_and_writes_nothing(
    queue: WorkQueue, redis_server: RedisServer
) -> None:
    before = sorted(redis_server.client().keys("*"))
    with pytest.raises(UnknownClassError, match=r"unknown research class 'nope' \(known: eval, "):
        queue.submit("nope", {})
    assert sorted(redis_server.client().keys("*")) == before


def test_status_snapshot_counts(queue: WorkQueue) -> None:
    a = queue.submit("eval", {})
    queue.submit("eval", {})
    queue.submit("train", {})
    queue.cancel(a)
    r = queue.take("eval", token="t", worker="w", lease_ms=60000, slots=None)
    assert r.lease is not None
    snap = queue.snapshot()
    counts = model.count_by_class(snap.classes, snap.items)
    assert counts["eval"].as_json() | {"gpu_seconds": 0} == {
        "queued": 0, "running": 1, "requeued": 0, "done": 0, "dead": 0, "cancelled": 1,
        "total": 2, "preemptions": 0, "lost": 0, "failures": 0, "gpu_seconds": 0,
    }  # fmt: skip
    assert counts["train"].queued == 1


# ---------------------------------------------------------------------- pure validation


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param("K=V", ("K", "V"), id="plain"),
        pytest.param("K=", ("K", ""), id="empty-value-allowed"),
        pytest.param("K=a=b", ("K", "a=b"), id="value-keeps-equals"),
        pytest.param("=V", "has an empty key", id="empty-key"),
        pytest.param("KV", "no '='", id="no-equals"),
        pytest.param("1K=V", "not an environment variable name", id="key-starts-with-digit"),
        pytest.param("K-1=V", "not an environment variable name", id="key-with-dash"),
        pytest.param("GPS_ITEM_ID=x", "reserved prefix", id="reserved-prefix"),
        pytest.param("K=a\0b", "NUL", id="nul-in-value"),
        pytest.param("K=" + "v" * 4096, ("K", "v" * 4096), id="value-at-its-longest"),
        pytest.param("K=" + "v" * 4097, "longer than 4096", id="value-one-longer"),
        # A long bad parameter is shown cut to 64 characters, whole up to 64.
        pytest.param("K" * 64, "'" + "K" * 64 + "' is not", id="bad-param-of-64-shown-whole"),
        pytest.param("K" * 65, "'" + "K" * 61 + r"\.\.\.' is not", id="bad-param-of-65-cut"),
    ],
)
def test_parse_param(raw: str, want: tuple[str, str] | str) -> None:
    if isinstance(want, tuple):
        assert model.parse_param(raw) == want
    else:
        with pytest.raises(InputError, match=want):
            model.parse_param(raw)


def test_at_most_max_params() -> None:
    assert model.MAX_PARAMS == 64
    raws = [f"K{i}=v" for i in range(64)]
    assert len(model.parse_params(raws)) == 64
    with pytest.raises(InputError, match="at most 64 --param, got 65"):
        model.parse_params([*raws, "K64=v"])


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        pytest.param("a" * 63, True, id="63-characters"),
        pytest.param("a" * 64, False, id="64-characters"),
        pytest.param("eval-1", True, id="dash-inside"),
        pytest.param("-eval", False, id="dash-first"),
    ],
)
def test_class_names_are_dns_labels(name: str, ok: bool) -> None:
    if ok:
        assert model.check_class_name(name) == name
    else:
        with pytest.raises(InputError, match="is not a DNS label"):
            model.check_class_name(name)


@pytest.mark.parametrize(
    ("url", "want"),
    [
        pytest.param("redis://h:6379/0", "redis://h:6379/0", id="no-credentials"),
        pytest.param("redis://:pw@h:6379/0", "redis://:***@h:6379/0", id="password-only"),
        pytest.param("redis://u:p%40w@h:1/2", "redis://u:***@h:1/2", id="user-and-quoted-pw"),
        pytest.param("rediss://u@h", "rediss://u@h", id="user-without-password"),
    ],
)
def test_redact_url(url: str, want: str) -> None:
    assert model.redact_url(url) == want


# submit's limits, checked before anything is written: (options, words of the error or None)
SUBMIT_LIMITS = {
    "one-attempt": ({"max_attempts": 1}, None),
    "a-thousand-attempts": ({"max_attempts": 1000}, None),
    "no-attempt": ({"max_attempts": 0}, "--max-attempts must be 1..1000, got 0"),
    "1001-attempts": ({"max_attempts": 1001}, "--max-attempts must be 1..1000, got 1001"),
    "one-loss": ({"max_lost": 1}, None),
    "a-thousand-losses": ({"max_lost": 1000}, None),
    "no-loss": ({"max_lost": 0}, "--max-lost must be 1..1000, got 0"),
    "1001-losses": ({"max_lost": 1001}, "--max-lost must be 1..1000, got 1001"),
    "one-gpu": ({"gpus": 1}, None),
    "1024-gpus": ({"gpus": 1024}, None),
    "no-gpu": ({"gpus": 0}, "--gpus must be 1..1024, got 0"),
    "1025-gpus": ({"gpus": 1025}, "--gpus must be 1..1024, got 1025"),
    "submitter-of-128": ({"submitter": "a" * 128}, None),
    "submitter-of-129": ({"submitter": "a" * 129}, "--submitter must be printable"),
    "submitter-with-a-tab": ({"submitter": "a\tb"}, "--submitter must be printable"),
}


@pytest.mark.parametrize(("opts", "error"), SUBMIT_LIMITS.values(), ids=SUBMIT_LIMITS.keys())
def test_submit_limits(queue: WorkQueue, opts: dict[str, Any], error: str | None) -> None:
    if error is None:
        assert queue.get(queue.submit("eval", {}, **opts)) is not None
    else:
        with pytest.raises(InputError, match=re.escape(error)):
            queue.submit("eval", {}, **opts)
        assert queue.snapshot().items == []  # nothing half-written


def test_class_counts_add_up_over_items() -> None:
    def item(i: int, state: str, **k: int) -> Item:
        return Item.from_hash({"id": str(i), "class": "eval", "state": state} | {
            key: str(v) for key, v in k.items()
        })  # fmt: skip

    items = [
        item(1, "done", gpu_ms=3000, preemptions=1, lost=0, failures=2),
        item(2, "running", gpu_ms=5000, preemptions=2, lost=1, failures=0),
    ]
    c = model.count_by_class(["eval"], items)["eval"]
    assert (c.done, c.running, c.gpu_ms, c.preemptions, c.lost, c.failures) == (1, 1, 8000, 3, 1, 2)


def test_a_class_s_total_counts_every_state() -> None:
    c = model.ClassCounts(queued=1, running=2, requeued=4, done=8, dead=16, cancelled=32)
    assert c.total == 63 and c.as_json()["total"] == 63


def test_item_roundtrip_from_hash() -> None:
    it = Item.from_hash({"id": "x", "class": "eval", "params": '{"A": "1"}', "attempts": "2"})
    assert (it.id, it.research_class, it.params, it.attempts, it.gpus) == (
        "x", "eval", {"A": "1"}, 2, 1,
    )  # fmt: skip
