"""Chaos: at least 200 items over 3 classes (more arrive while chaos is unspent), 8
concurrent gpu-pool-worker processes, random SIGTERM (preemption) and SIGKILL of a worker
with its command (node loss), and one Redis crash (SIGKILL; AOF with appendfsync always).

The command checkpoints after every step and logs to its checkpoint dir, in order:
`start A D` (attempt A resumes after step D), `exec K A` before step K, `ckpt K A` after
step K's checkpoint is durable (atomic rename), `term A` when it stops on SIGTERM (only at
a step boundary), `end A` when all steps are done.

Invariants checked per item (the exact statement of "work is not redone"):
  1. attempts never overlap: lines of attempt A+1 never precede a line of attempt A;
  2. every attempt resumes from the durable checkpoint: its D = the highest step whose
     checkpoint rename completed before it (read from the next attempt's `start` line: a
     kill between the rename and the `ckpt` line leaves a durable step without its line);
  3. the steps made durable by successive attempts partition 1..N: each exactly once;
  4. a step runs a second time only if its first run's checkpoint rename never happened,
     and that is only ever the LAST exec of an attempt that was killed (outcome `lost`),
     at most one step per such attempt; an attempt stopped by SIGTERM (`term`) leaves
     nothing to redo;
  5. exactly one completion per item (one `done` event, one completion record), and in
     Redis attempts = preemptions + lost + failures + 1 with failures = 0.
The status command's --json counts must equal the ground truth: the items this test
submitted per class, and the per-attempt outcomes in the event stream.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from scaler.research.queue import WorkQueue
from scaler.research.redisconn import connect
from tests.support.redisserver import RedisServer, running_redis

REPO = Path(__file__).resolve().parent.parent
CLASSES = ("alpha", "beta", "gamma")
ITEMS = 200  # submitted up front; more arrive (WORKERS at a time) while the chaos budget lasts
WORKERS = 8
LEASE_S = 2.0
STEP_S = 0.04
SIGTERMS = 30  # preemptions sent (each to a worker running a command)
NODE_LOSSES = 12
RESTART_AT_DONE = 70
DEADLINE_S = 85.0

COMMAND = r"""
import os, signal, sys, time
ck = os.environ["GPS_CHECKPOINT_DIR"]
a = os.environ["GPS_ATTEMPT"]
steps, step_s = int(os.environ["STEPS"]), float(os.environ["STEP_S"])
term = False
def on_term(signum, frame):
    global term
    term = True
signal.signal(signal.SIGTERM, on_term)
progress = os.path.join(ck, "progress")
try:
    done = int(open(progress).read())
except FileNotFoundError:
    done = 0
fd = os.open(os.path.join(ck, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def rec(line):
    os.write(fd, (line + "\n").encode())  # one O_APPEND write: lines never tear
rec(f"start {a} {done}")
for k in range(done + 1, steps + 1):
    if term:
        rec(f"term {a}")
        sys.exit(143)
    rec(f"exec {k} {a}")
    time.sleep(step_s)
    with open(progress + ".tmp", "w") as f:
        f.write(str(k))
    os.replace(progress + ".tmp", progress)
    rec(f"ckpt {k} {a}")
rec(f"end {a}")
"""


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path, password="chaos-pw", persistent=True)


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    cls: str
    started: float
    log: Path
    hit: str = ""  # "term" | "kill" once chaos picked it


@dataclass
class Stats:
    spawned: int = 0
    sigterms: int = 0
    node_losses: int = 0
    redis_down_s: float = 0.0
    exits: collections.Counter[int] = field(default_factory=collections.Counter)


def child_groups(pid: int) -> set[int]:
    """Process groups of `pid`'s children (the worker starts its command in its own group)."""
    groups = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            groups.add(int(fields[2]))
    return groups


def node_loss(w: Worker) -> None:
    """The node dies: worker and command vanish at once, nothing reported."""
    pid = w.proc.pid
    os.kill(pid, signal.SIGSTOP)  # frozen: it cannot start a command we would miss
    groups = child_groups(pid)
    os.kill(pid, signal.SIGKILL)
    # A child caught between fork and its setpgid is still in the worker's group: the
    # worker has its own session, so that is never ours, but check anyway.
    for g in groups - {os.getpgrp()}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(g, signal.SIGKILL)


def parse_log(lines: list[str]) -> list[tuple[str, int, int]]:
    """(kind, attempt, step) in file order; step = resume point for `start`, 0 for term/end."""
    out = []
    for line in lines:
        kind, *nums = line.split()
        if kind in ("exec", "ckpt"):
            out.append((kind, int(nums[1]), int(nums[0])))
        elif kind == "start":
            out.append((kind, int(nums[0]), int(nums[1])))
        else:
            out.append((kind, int(nums[0]), 0))
    return out


@dataclass
class LogCheck:
    last_attempt: int
    resumed: int  # attempts that started from a checkpoint > 0
    redone: int  # steps run a second time (after a kill mid-step)


def check_item_log(
    log: list[tuple[str, int, int]], n_steps: int, outcomes: Mapping[int, list[str]]
) -> LogCheck:
    """Invariants 1-4 of the module docstring for one item's command log.

    The checkpoint is what the next attempt reads (`start A D`); a `ckpt` line is written
    after the rename, so a kill between the two leaves a durable step without its line.
    """
    where = f"log {log}"
    order = [a for _, a, _ in log]
    assert order == sorted(order), f"attempts overlapped: {where}"  # (1)
    attempts = sorted(set(order))
    lines = {a: [(kind, k) for kind, aa, k in log if aa == a] for a in attempts}
    for a in attempts:
        assert lines[a][0][0] == "start" and [k for k, _ in lines[a]].count("start") == 1, where
    starts = [lines[a][0][1] for a in attempts]
    durable_after = [*starts[1:], n_steps]  # what the next attempt found (the last: all)
    resumed = redone = 0
    durable = 0
    for a, d, after in zip(attempts, starts, durable_after, strict=True):
        assert d == durable, f"attempt {a} did not resume from the checkpoint: {where}"  # (2)
        assert after >= d, where
        resumed += d > 0
        execs = [k for kind, k in lines[a] if kind == "exec"]
        assert execs == list(range(d + 1, d + 1 + len(execs))), where
        assert len(execs) >= after - d, f"attempt {a}: a step became durable unrun: {where}"
        lost_steps = execs[after - d :]  # ran, never made durable: the next attempt redoes it
        ckpts = [k for kind, k in lines[a] if kind == "ckpt"]
        assert max(ckpts, default=d) <= after, f"next attempt did not resume: {where}"  # (2)
        assert set(range(d + 1, after)) <= set(ckpts), where
        if lost_steps:  # (4)
            assert len(lost_steps) == 1, f"attempt {a} lost more than its last step: {where}"
            assert outcomes[a] == ["lost"], f"attempt {a} {outcomes[a]}: {where}"
            redone += 1
        if ("term", 0) in lines[a]:
            assert outcomes[a] == ["preempted"] and not lost_steps, where
        durable = after
    assert ("end", 0) in lines[attempts[-1]], where
    assert outcomes[attempts[-1]] == ["done"], where
    return LogCheck(attempts[-1], resumed, redone)  # (3): durable steps partition 1..N


def test_chaos_every_item_completes_exactly_once(redis_server: RedisServer, tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    print(f"chaos seed {seed} (CHAOS_SEED={seed} to replay the same choices)")
    client = connect(redis_server.url, timeout_s=2)
    q = WorkQueue(client)
    q.update_classes(add=CLASSES)
    steps: dict[str, int] = {}
    cls_of: dict[str, str] = {}

    def submit(n: int) -> None:
        for _ in range(n):
            c, k = CLASSES[len(steps) % len(CLASSES)], rng.randint(3, 6)
            # max_lost high: this test injects node losses on purpose; the cap has its own test.
            item_id = q.submit(c, {"STEPS": str(k), "STEP_S": str(STEP_S)}, max_lost=100)
            steps[item_id], cls_of[item_id] = k, c

    submit(ITEMS)
    cmd = tmp_path / "command.py"
    cmd.write_text(COMMAND)
    root, logs = tmp_path / "ck", tmp_path / "logs"
    logs.mkdir()
    env = dict(os.environ, GPS_REDIS_URL=redis_server.url)

    stats = Stats()
    live: list[Worker] = []
    finished: list[Worker] = []
    last_empty_spawn: dict[str, float] = {}

    def spawn(c: str) -> None:
        stats.spawned += 1
        log = logs / f"worker-{stats.spawned:03d}-{c}.log"
        argv = [sys.executable, "-m", "scaler.research.worker", "--class", c]
        argv += ["--no-scaler-check", "--checkpoint-root", str(root), "--log-format", "text"]
        argv += ["--lease-seconds", str(LEASE_S), "--grace-seconds", "5"]
        argv += ["--redis-retry-seconds", "20", "--", sys.executable, "-S", str(cmd)]
        with log.open("wb") as f:
            p = subprocess.Popen(
                argv,
                env=env,
                cwd=REPO,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # like a pod: its own session, never the test's group
            )
        live.append(Worker(p, c, time.monotonic(), log))

    def pick_class(by_cls: dict[str, collections.Counter[str]], now: float) -> str | None:
        best, best_score = None, 0
        for c in CLASSES:
            cnt = by_cls[c]
            waiting = cnt["queued"] + cnt["requeued"]
            orphaned = cnt["orphaned"]  # running under a dead worker: requeued at expiry
            if waiting + orphaned == 0:
                continue
            if waiting == 0 and now - last_empty_spawn.get(c, 0) < 0.5:
                continue  # only orphans: one probe per 0.5 s, not a spawn storm
            score = waiting + orphaned - sum(1 for w in live if w.cls == c)
            if score > best_score:
                best, best_score = c, score
        if best is not None and by_cls[best]["queued"] + by_cls[best]["requeued"] == 0:
            last_empty_spawn[best] = now
        return best

    t0 = time.monotonic()
    next_chaos = t0 + 1.0
    restarted = False
    done = 0
    by_cls: dict[str, collections.Counter[str]] = {c: collections.Counter() for c in CLASSES}
    next_look = 0.0
    while True:
        now = time.monotonic()
        for w in list(live):
            rc = w.proc.poll()
            if rc is not None:
                live.remove(w)
                finished.append(w)
                stats.exits[rc] += 1
                assert rc in (0, 143, -signal.SIGKILL), (rc, w.log.read_text()[-3000:])
        looked = False
        if now >= next_look:
            next_look = now + 0.2
            try:
                snap = q.snapshot()
            except redis.exceptions.RedisError:
                snap = None  # Redis is restarting
            if snap is not None:
                assert len(snap.items) == len(steps)  # nothing ever lost, at any moment
                live_pids = {str(w.proc.pid) for w in live}
                by_cls = {c: collections.Counter() for c in CLASSES}
                for it in snap.items:
                    state = it.state
                    if state == "running" and it.worker.rsplit("/", 1)[-1] not in live_pids:
                        state = "orphaned"
                    by_cls[it.research_class][state] += 1
                done = sum(c["done"] for c in by_cls.values())
                looked = True
                assert all(
                    it.state in ("queued", "running", "requeued", "done") for it in snap.items
                )
        chaos_left = (SIGTERMS - stats.sigterms) + (NODE_LOSSES - stats.node_losses)
        if done == len(steps) and chaos_left == 0:
            break
        # Work keeps arriving until every SIGTERM and node loss has been injected: a run that
        # drained the queue first would test less chaos than it claims. Judged on a fresh look.
        waiting = sum(c["queued"] + c["requeued"] for c in by_cls.values())
        if chaos_left and looked and waiting < WORKERS:
            submit(WORKERS)
        total = len(steps)
        assert now - t0 < DEADLINE_S, f"not done after {DEADLINE_S} s: {done}/{total}, {stats}"
        if not restarted and done >= RESTART_AT_DONE:
            stats.redis_down_s = redis_server.restart(kill=True)  # crash; AOF brings it back
            restarted = True
        if now >= next_chaos and (stats.sigterms < SIGTERMS or stats.node_losses < NODE_LOSSES):
            busy = [
                w for w in live if not w.hit and now - w.started > 0.3 and child_groups(w.proc.pid)
            ]
            if busy:
                w = rng.choice(busy)
                kills_left = NODE_LOSSES - stats.node_losses
                kill = rng.random() * chaos_left < kills_left  # spend both budgets evenly
                if kill:
                    node_loss(w)
                    w.hit, stats.node_losses = "kill", stats.node_losses + 1
                else:
                    w.proc.send_signal(signal.SIGTERM)
                    w.hit, stats.sigterms = "term", stats.sigterms + 1
                next_chaos = now + rng.uniform(0.1, 0.5)
        while len(live) < WORKERS:
            chosen = pick_class(by_cls, now)
            if chosen is None:
                break
            spawn(chosen)
            by_cls[chosen]["spawned"] += 1
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    submitted = collections.Counter(cls_of.values())
    for w in live:  # the rest see an empty queue and exit 0
        rc = w.proc.wait(timeout=30)
        stats.exits[rc] += 1
        finished.append(w)
        assert rc in (0, 143, -signal.SIGKILL), (rc, w.log.read_text()[-3000:])
    for w in finished:
        text = w.log.read_text()
        assert "Traceback" not in text and "chaos-pw" not in text, text[-3000:]

    # ------------------------------------------------------------ Redis's record
    events = q.events()
    takes: collections.Counter[tuple[str, int]] = collections.Counter()
    outcome: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    duplicates = 0
    for e in events:
        if e["event"] == "take":
            takes[(e["id"], int(e["attempt"]))] += 1
        elif e["event"] in ("done", "preempted", "lost", "failed", "cancelled"):
            outcome[(e["id"], int(e["attempt"]))].append(e["event"])
        elif e["event"] == "duplicate_refused":
            duplicates += 1
    assert set(takes.values()) == {1}, "an attempt number was leased twice"
    assert set(outcome) == set(takes), "an attempt has no outcome (or one without a take)"
    assert all(len(v) == 1 for v in outcome.values()), "an attempt ended twice"

    # ------------------------------------------------------------ per item invariants
    resumed = redone = preempted_attempts = lost_attempts = 0
    for item_id, n_steps in steps.items():
        item = q.get(item_id)
        assert item is not None and item.state == "done", (item_id, item)
        it = item
        ends = [outcome[(item_id, a)][0] for a in range(1, it.attempts + 1)]
        assert ends.count("done") == 1 and ends[-1] == "done", (item_id, ends)
        assert q.completion(item_id)["attempt"] == str(it.attempts)
        assert it.failures == 0 and "failed" not in ends
        assert it.preemptions == ends.count("preempted") and it.lost == ends.count("lost")
        assert it.attempts == it.preemptions + it.lost + 1
        preempted_attempts += it.preemptions
        lost_attempts += it.lost

        log = parse_log((root / cls_of[item_id] / item_id / "log").read_text().splitlines())
        ends_of = {a: outcome[(item_id, a)] for a in range(1, it.attempts + 1)}
        r = check_item_log(log, n_steps, ends_of)
        assert r.last_attempt == it.attempts, (item_id, log)
        resumed += r.resumed
        redone += r.redone

    # ------------------------------------------------------------ status --json vs truth
    p = subprocess.run(
        [sys.executable, "-m", "scaler.research.cli", "status", "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    for c in CLASSES:
        got = doc["classes"][c]
        of_class = [i for i in steps if cls_of[i] == c]
        want_pre = sum(outcome[k].count("preempted") for k in outcome if cls_of[k[0]] == c)
        want_lost = sum(outcome[k].count("lost") for k in outcome if cls_of[k[0]] == c)
        assert got == got | {
            "done": submitted[c], "total": submitted[c], "queued": 0, "running": 0,
            "requeued": 0, "dead": 0, "cancelled": 0, "failures": 0,
            "preemptions": want_pre, "lost": want_lost,
        }, (c, got)  # fmt: skip
        assert len(of_class) == submitted[c]
    assert sorted(i["id"] for i in doc["items"]) == sorted(steps)
    for i in doc["items"]:
        taken = sum(1 for k in takes if k[0] == i["id"])
        assert (i["state"], i["attempts"]) == ("done", taken)
    for c in CLASSES:
        assert q.live_leases(c) == 0 and q.queued_ids(c) == [] and q.dead_letters(c) == []

    summary = (
        f"chaos: {len(steps)} items done exactly once in {elapsed:.1f} s; workers spawned "
        f"{stats.spawned}, exits {dict(stats.exits)}; SIGTERM sent {stats.sigterms}, node "
        f"losses {stats.node_losses}; Redis crash+restart, down {stats.redis_down_s:.2f} s; "
        f"attempts preempted {preempted_attempts}, lost {lost_attempts}, resumed from a "
        f"checkpoint {resumed}, steps redone after a kill {redone}, duplicate completions "
        f"refused {duplicates}"
    )
    print(summary)
    (tmp_path / "summary.txt").write_text(summary + "\n")
    assert stats.node_losses == NODE_LOSSES and stats.sigterms == SIGTERMS
    assert restarted and preempted_attempts > 0 and lost_attempts > 0 and resumed > 0
    client.close()


# Logs as the command writes them; outcomes as Redis records them.
_RUN5 = "start 1 0|exec 1 1|ckpt 1 1|term 1|start 2 1|exec 2 2|ckpt 2 2|exec 3 2|start 3 3|"
_RUN5 += "exec 4 3|ckpt 4 3|exec 5 3|ckpt 5 3|end 3"


@pytest.mark.parametrize(
    ("text", "n", "ends", "want"),
    [
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|exec 2 1|ckpt 2 1|end 1", 2, "done", (0, 0),
                     id="clean-run"),
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|term 1|start 2 1|exec 2 2|ckpt 2 2|end 2", 2,
                     "preempted done", (1, 0), id="preempted-and-resumed"),
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|exec 2 1|start 2 1|exec 2 2|ckpt 2 2|end 2", 2,
                     "lost done", (1, 1), id="killed-mid-step-redoes-that-step"),
        pytest.param(_RUN5, 5, "preempted lost done", (2, 0),
                     id="killed-after-rename-before-ckpt-line-redoes-nothing"),
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|exec 2 1|start 3 1|exec 2 3|ckpt 2 3|end 3", 2,
                     "lost lost done", (1, 1), id="attempt-leased-and-lost-before-it-logged"),
        pytest.param("start 1 0|exec 1 1|start 2 0|ckpt 1 1|exec 1 2|ckpt 1 2|end 2", 1,
                     "lost done", "overlapped", id="bad-attempts-overlap"),
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|term 1|start 2 0|exec 1 2|ckpt 1 2|end 2", 1,
                     "preempted done", "did not resume", id="bad-restart-from-scratch"),
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|exec 2 1|term 1|start 2 1|exec 2 2|ckpt 2 2|"
                     "end 2", 2, "preempted done", "preempted", id="bad-sigterm-left-work-undone"),
        pytest.param("start 1 0|exec 1 1|exec 2 1|start 2 0|exec 1 2|exec 2 2|ckpt 1 2|"
                     "ckpt 2 2|end 2", 2, "lost done", "lost more than", id="bad-two-steps-lost"),
        pytest.param("start 1 0|exec 1 1|ckpt 1 1|exec 2 1|start 2 1|exec 2 2|ckpt 2 2|end 2", 2,
                     "preempted done", "preempted", id="bad-step-lost-without-a-kill"),
    ],
)  # fmt: skip
def test_log_checker(text: str, n: int, ends: str, want: tuple[int, int] | str) -> None:
    """The invariant checker itself: accepts what chaos may do, rejects what must not happen."""
    log = parse_log(text.split("|"))
    outcomes = {a + 1: [e] for a, e in enumerate(ends.split())}
    if isinstance(want, tuple):
        r = check_item_log(log, n, outcomes)
        assert (r.resumed, r.redone) == want
    else:
        with pytest.raises(AssertionError, match=want):
            check_item_log(log, n, outcomes)
