"""`gpu-pool-scaler research ...` against a real redis-server: happy paths and bad input.

Every bad input must give exit 2, exactly one line on stderr, and leave Redis byte-for-byte
as it was (checked with DUMP of every key).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from scaler.research.cli import _age, add_subcommands, classes_from_config, render_table
from scaler.research.model import InputError, Item
from scaler.research.queue import Snapshot, WorkQueue
from scaler.research.redisconn import connect
from tests.support.redisserver import RedisServer, running_redis

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "pw-that-must-not-leak"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path, password=PASSWORD)


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scaler.research.cli", *argv],
        cwd=REPO,
        env=dict(os.environ, **(env or {})),
        capture_output=True,
        text=True,
        timeout=30,
    )


def fingerprint(server: RedisServer) -> dict[Any, Any]:
    """Every key with its DUMP (type, value, encoding): equal = Redis unchanged."""
    raw = redis.Redis(host="127.0.0.1", port=server.port, password=PASSWORD)
    try:
        keys: Any = raw.keys("*")
        return {k: raw.dump(k) for k in sorted(keys)}
    finally:
        raw.close()


@pytest.fixture
def seeded(redis_server: RedisServer) -> RedisServer:
    """Two registered classes and one queued item (written directly: fewer subprocesses)."""
    q = WorkQueue(connect(redis_server.url))
    q.update_classes(add=["eval", "train"])
    q.submit("eval", {"A": "1"})
    q.redis.close()
    return redis_server


def test_submit_status_cancel(seeded: RedisServer) -> None:
    u = seeded.url
    p = cli("classes", "--redis", u)
    assert (p.returncode, p.stdout) == (0, "eval\ntrain\n")
    p = cli("submit", "--redis", u, "--class", "train", "--param", "LR=0.1", "--param", "X=a=b",
            "--max-attempts", "5", "--submitter", "ada")  # fmt: skip
    assert p.returncode == 0, p.stderr
    item_id = p.stdout.strip()
    assert len(item_id) == 16 and p.stderr == ""

    st = cli("status", "--redis", u, "--json")
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert doc["classes"]["train"]["queued"] == 1 and doc["classes"]["eval"]["queued"] == 1
    [item] = [i for i in doc["items"] if i["id"] == item_id]
    assert item["params"] == {"LR": "0.1", "X": "a=b"}
    assert (item["state"], item["submitter"], item["max_attempts"]) == ("queued", "ada", 5)

    text = cli("status", "--redis", u, "--class", "train").stdout
    assert "CLASS" in text and "REQUEUED" in text and item_id in text and "eval" not in text

    c = cli("cancel", "--redis", u, item_id)
    assert (c.returncode, c.stdout.strip()) == (0, f"cancelled {item_id}")
    again = cli("cancel", "--redis", u, item_id)
    assert (
        again.returncode == 1
        and again.stderr.strip() == f"error: item {item_id} is already cancelled"
    )
    doc = json.loads(cli("status", "--redis", u, "--json").stdout)
    assert doc["classes"]["train"]["cancelled"] == 1 and doc["classes"]["train"]["queued"] == 0
    assert PASSWORD not in st.stdout + text


def test_password_from_the_environment(seeded: RedisServer) -> None:
    p = cli("submit", "--class", "eval", env={"GPS_REDIS_URL": seeded.url})
    assert p.returncode == 0, p.stderr


def test_classes_synced_from_the_scaler_config(seeded: RedisServer) -> None:
    p = cli("classes", "--redis", seeded.url, "--sync-config", "scaler/examples/pool.yaml")
    assert (p.returncode, p.stdout) == (0, "eval\n")
    bad = cli("submit", "--redis", seeded.url, "--class", "train")
    assert bad.returncode == 2 and "unknown research class 'train' (known: eval)" in bad.stderr


def test_hooked_into_a_parent_parser(seeded: RedisServer) -> None:
    """How `gpu-pool-scaler research ...` uses it: add_subcommands + args.func(args)."""
    parser = argparse.ArgumentParser(prog="gpu-pool-scaler")
    sub = parser.add_subparsers(dest="command", required=True)
    research = sub.add_parser("research")
    add_subcommands(research.add_subparsers(dest="research_command", required=True))
    args = parser.parse_args(["research", "submit", "--redis", seeded.url, "--class", "eval"])
    assert (args.log_format, args.log_level) == ("text", "WARNING")  # what the parent reads
    out = io.StringIO()
    assert args.func(args, out=out) == 0
    assert len(out.getvalue().strip()) == 16


def _url(server: RedisServer, which: str) -> str:
    return {
        "ok": server.url,
        "wrong-password": server.url.replace(PASSWORD, "nope"),
        "no-password": server.url.replace(f":{PASSWORD}@", ""),
        "unreachable": f"redis://:{PASSWORD}@127.0.0.1:1/0",
        "not-redis": f"http://:{PASSWORD}@127.0.0.1:{server.port}/",
    }[which]


BAD_INPUT = [
    pytest.param("ok", ["submit", "--class", "nope"],
                 "error: unknown research class 'nope' (known: eval, train)", id="unknown-class"),
    pytest.param("ok", ["submit", "--class", "Eval_1"],
                 "error: research class 'Eval_1' is not a DNS label", id="class-not-dns-label"),
    pytest.param("ok", ["submit", "--class", "eval", "--param", "A=1", "--param", "=x"],
                 "error: --param '=x' has an empty key", id="param-empty-key"),
    pytest.param("ok", ["submit", "--class", "eval", "--param", "A"],
                 "error: --param 'A' is not KEY=VALUE (no '=')", id="param-without-equals"),
    pytest.param("ok", ["submit", "--class", "eval", "--param", "GPS_ATTEMPT=9"],
                 "error: --param key 'GPS_ATTEMPT' uses the reserved prefix", id="param-reserved"),
    pytest.param("ok", ["submit", "--class", "eval", "--param", "A=1", "--param", "A=2"],
                 "error: --param A given twice", id="param-twice"),
    pytest.param("ok", ["submit", "--class", "eval", "--max-attempts", "0"],
                 "error: --max-attempts must be 1..1000, got 0", id="max-attempts-zero"),
    pytest.param("unreachable", ["submit", "--class", "eval"],
                 "error: cannot reach Redis at redis://:***@127.0.0.1:1/0", id="redis-unreachable"),
    pytest.param("wrong-password", ["submit", "--class", "eval"],
                 "error: Redis at redis://:***@127.0.0.1:", id="wrong-password"),
    pytest.param("no-password", ["submit", "--class", "eval"],
                 "error: Redis at redis://127.0.0.1:", id="missing-password"),
    pytest.param("not-redis", ["submit", "--class", "eval"],
                 "error: --redis 'http://:***@127.0.0.1:", id="not-a-redis-url"),
    pytest.param("ok", ["cancel", "0123456789abcdef"], "error: no item '0123456789abcdef'",
                 id="cancel-unknown-id"),
    pytest.param("ok", ["status", "--class", "nope"],
                 "error: unknown research class 'nope' (known: eval, train)", id="status-unknown"),
    pytest.param("ok", ["classes", "--add", "ok", "--add", "Not OK"],
                 "error: research class 'Not OK' is not a DNS label", id="classes-bad-name"),
    pytest.param("ok", ["classes", "--sync-config", "/nonexistent/pool.yaml"],
                 "error: --sync-config /nonexistent/pool.yaml: cannot read", id="config-missing"),
    pytest.param("ok", ["submit", "--class", "eval", "--bogus"],
                 "error: unrecognized arguments: --bogus", id="unknown-flag"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "argv", "want"), BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    seeded: RedisServer, url: str, argv: list[str], want: str
) -> None:
    before = fingerprint(seeded)
    p = cli(*argv[:1], "--redis", _url(seeded, url), *argv[1:])
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(want), p.stderr
    assert PASSWORD not in p.stderr
    assert fingerprint(seeded) == before


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("research:\n  - name: a\n  - name: b\n", ["a", "b"], id="two"),
        pytest.param("pool: {name: p}\n", [], id="no-research-key"),
        pytest.param("research: [{name: a}, {name: a}]\n", "repeat", id="duplicate"),
        pytest.param("research: [{gpusPerJob: 1}]\n", "list of", id="no-name"),
        pytest.param("research: [\n", "not YAML", id="broken-yaml"),
        pytest.param(None, "pool.yaml: cannot read: No such file or directory$", id="missing"),
    ],
)
def test_classes_from_config(tmp_path: Path, text: str | None, want: list[str] | str) -> None:
    p = tmp_path / "pool.yaml"
    if text is not None:
        p.write_text(text)
    if isinstance(want, list):
        assert classes_from_config(str(p)) == want
    else:
        with pytest.raises(InputError, match=want):
            classes_from_config(str(p))


# -- the status table (pure: a snapshot and the clock) --------------------------------

NOW_MS = 1_765_000_000_000


# Created this long before now -> AGE.
AGES = {
    "not-set": (None, "-"),
    "in-the-future-is-0s": (-5, "0s"),
    "119-s": (119, "119s"),
    "2-min": (120, "2m"),
    "119-min": (7199, "119m"),
    "2-h": (7200, "2h"),
    "47-h": (172_799, "47h"),
    "2-days": (172_800, "2d"),
}


@pytest.mark.parametrize(("ago_s", "shown"), AGES.values(), ids=AGES.keys())
def test_ages_in_the_status_table(ago_s: int | None, shown: str) -> None:
    created = 0 if ago_s is None else NOW_MS - ago_s * 1000
    assert _age(created, NOW_MS) == shown


def test_the_status_table() -> None:
    """Running first, then waiting, then finished, newest first in each; a cancel pending
    marked; the last error on one line, cut at 60; the items past --limit counted."""

    def item(n: int, state: str, ago_s: int, **kw: Any) -> Item:
        at = NOW_MS - ago_s * 1000
        return Item(f"i{n}", "eval", state=state, created_ms=at, updated_ms=at, **kw)

    items = [
        item(1, "done", 90_000, attempts=1, gpu_ms=7_200_000, submitter="ada"),
        item(2, "dead", 400, attempts=3, failures=3, last_error="boom\n" + "x" * 80),
        item(3, "running", 50, attempts=2, preemptions=1, cancel_requested=True),
        item(4, "queued", 10),
        item(5, "running", 30, attempts=1, lost=1),
    ]
    snap = Snapshot(["eval", "old"], frozenset({"eval"}), items)
    got = render_table(snap, limit=4, now_ms=NOW_MS)
    cut = "boom " + "x" * 52 + "..."  # 60 characters
    assert got.splitlines() == [
        "CLASS               QUEUED  RUNNING  REQUEUED  DONE  DEAD  CANCELLED  PREEMPTED  LOST"
        "  FAILED  GPU-H",
        "eval                     1        2         0     1     1          0          1     1"
        "       3   2.00",
        "old (unregistered)       0        0         0     0     0          0          0     0"
        "       0   0.00",
        "",
        "ITEM  CLASS  STATE     ATTEMPT  FAILED  PREEMPTED  LOST  GPU-S  AGE  SUBMITTER"
        "  LAST ERROR",
        "i5    eval   running         1     0/3          0     1    0.0  30s",
        "i3    eval   running*        2     0/3          1     0    0.0  50s",
        "i4    eval   queued          0     0/3          0     0    0.0  10s",
        "i2    eval   dead            3     3/3          0     0    0.0   6m             " + cut,
        "... 1 more items (--limit 0 shows all)",
        "* cancel requested: the worker stops it at its next heartbeat",
        "",
        "5 items, 1 done",
    ]
    # No limit: all of them, the finished ones last; a running item not being cancelled
    # needs no footnote; an error of exactly 60 characters is shown whole.
    ran = replace(items[0], last_error="e" * 60)
    every = render_table(
        Snapshot(["eval"], frozenset({"eval"}), [ran, items[4]]), limit=0, now_ms=NOW_MS
    )
    lines = every.splitlines()
    assert [line.split()[0] for line in lines[4:6]] == ["i5", "i1"]
    assert lines[5].endswith("7200.0  25h  ada        " + "e" * 60), lines[5]
    assert "more items" not in every and "*" not in every
