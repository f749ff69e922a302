"""Researcher commands: `gpu-pool-scaler research submit|status|cancel|classes`.

Hook into a parent parser with `add_subcommands(subparsers)`; each subcommand sets
`func=run` (returns the exit code). Standalone: `python -m scaler.research.cli ...`.

Exit codes: 0 ok; 1 cancel of an item that already finished; 2 bad input (unknown class,
malformed --param, unreadable config), Redis unreachable or refusing the credentials. Each
error is one line on stderr, and nothing is written: input is validated first and every
write is a single atomic script or transaction.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import redis
import yaml

from scaler.research.model import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_LOST,
    DONE,
    RUNNING,
    TERMINAL,
    InputError,
    Item,
    check_class_name,
    count_by_class,
    parse_params,
)
from scaler.research.queue import DEFAULT_PREFIX, Snapshot, WorkQueue
from scaler.research.redisconn import connect, describe

EXIT_OK = 0
EXIT_CONFLICT = 1
EXIT_USAGE = 2

Printer = Callable[[str], None]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        default=os.environ.get("GPS_REDIS_URL"),
        help="redis://[:password@]host:port/db (default: $GPS_REDIS_URL)",
    )
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help="Redis key prefix (default gps)")
    # The parent CLI sets up logging from these; research commands print, they do not log.
    p.set_defaults(func=run, log_format="text", log_level="WARNING")


def add_subcommands(subparsers: Any) -> None:
    """Add submit/status/cancel/classes to an argparse subparsers action."""
    submit = subparsers.add_parser("submit", help="queue one work item; prints its id")
    _common(submit)
    submit.add_argument("--class", dest="research_class", required=True)
    submit.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="parameter, given to the command as environment variable K (repeatable)",
    )
    submit.add_argument(
        "--max-attempts",
        type=int,
        default=DEFAULT_MAX_ATTEMPTS,
        help=f"failures (nonzero exits) before dead-letter (default {DEFAULT_MAX_ATTEMPTS})",
    )
    submit.add_argument(
        "--max-lost",
        type=int,
        default=DEFAULT_MAX_LOST,
        help=f"lost leases (worker/node died) before dead-letter (default {DEFAULT_MAX_LOST})",
    )
    submit.add_argument("--gpus", type=int, default=1, help="GPUs the item uses (GPU-seconds)")
    submit.add_argument("--submitter", default=None, help="default: your user name")
    submit.set_defaults(research_cmd="submit")

    status = subparsers.add_parser("status", help="counts per class and state of each item")
    _common(status)
    status.add_argument("--class", dest="research_class")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--limit", type=int, default=50, help="items listed in the table (0: all; JSON: all)"
    )
    status.set_defaults(research_cmd="status")

    cancel = subparsers.add_parser("cancel", help="remove a queued item / stop a running one")
    _common(cancel)
    cancel.add_argument("item_id", metavar="ID")
    cancel.set_defaults(research_cmd="cancel")

    classes = subparsers.add_parser(
        "classes", help="show or change the registry of research classes (admin)"
    )
    _common(classes)
    classes.add_argument("--add", action="append", default=[], metavar="NAME")
    classes.add_argument("--remove", action="append", default=[], metavar="NAME")
    classes.add_argument(
        "--sync-config",
        metavar="CONFIG.yaml",
        help="make the registry exactly the scaler config's research[].name",
    )
    classes.set_defaults(research_cmd="classes")


def classes_from_config(path: str) -> list[str]:
    """research[].name of the scaler's config file (only that key is read)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise InputError(f"--sync-config {path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise InputError(f"--sync-config {path}: not YAML: {' '.join(str(e).split())}") from None
    research = doc.get("research") if isinstance(doc, dict) else None
    if research is None:
        research = []
    if not isinstance(research, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in research
    ):
        raise InputError(f"--sync-config {path}: 'research' must be a list of {{name: ...}}")
    names = [check_class_name(r["name"]) for r in research]
    if len(set(names)) != len(names):
        raise InputError(f"--sync-config {path}: research names repeat")
    return names


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        return _dispatch(args, out, err)
    except InputError as e:
        print(f"error: {e}", file=err)
        return EXIT_USAGE
    except redis.exceptions.RedisError as e:
        print(f"error: {describe(e, args.redis or '')}", file=err)
        return EXIT_USAGE
    except BrokenPipeError:  # `status | head`: the reader left, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cmd = args.research_cmd
    params: dict[str, str] = {}
    synced: list[str] | None = None
    # Validate everything that needs no Redis before connecting.
    if cmd == "submit":
        check_class_name(args.research_class)
        params = parse_params(args.param)
    if cmd == "classes":
        for n in [*args.add, *args.remove]:
            check_class_name(n)
        synced = classes_from_config(args.sync_config) if args.sync_config else None
    if getattr(args, "research_class", None):
        check_class_name(args.research_class)
    if not args.redis:
        raise InputError("--redis URL is required (or set GPS_REDIS_URL)")
    client = connect(args.redis)
    try:
        q = WorkQueue(client, args.prefix)
        client.ping()  # unreachable / wrong password: fail here, before anything else
        if cmd == "submit":
            q.require_class(args.research_class)
            submitter = args.submitter if args.submitter is not None else _user()
            item_id = q.submit(
                args.research_class,
                params,
                submitter=submitter,
                gpus=args.gpus,
                max_attempts=args.max_attempts,
                max_lost=args.max_lost,
            )
            print(item_id, file=out)
            return EXIT_OK
        if cmd == "cancel":
            return _cancel(q, args.item_id, out, err)
        if cmd == "classes":
            if args.add or args.remove or synced is not None:
                reg = q.update_classes(add=args.add, remove=args.remove, replace=synced)
            else:
                reg = q.registered_classes()
            for name in sorted(reg):
                print(name, file=out)
            return EXIT_OK
        if cmd == "status":
            return _status(q, args, out)
        raise InputError(f"unknown research command {cmd!r}")
    finally:
        client.close()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def _cancel(q: WorkQueue, item_id: str, out: TextIO, err: TextIO) -> int:
    r = q.cancel(item_id)
    if r == "cancelled":
        print(f"cancelled {item_id}", file=out)
        return EXIT_OK
    if r == "cancelling":
        print(f"cancelling {item_id}: its worker stops the command at its next heartbeat", file=out)
        return EXIT_OK
    if r == "missing":
        raise InputError(f"no item {item_id!r}")
    print(f"error: item {item_id} is already {r.removeprefix('already:')}", file=err)
    return EXIT_CONFLICT


def _status(q: WorkQueue, args: argparse.Namespace, out: TextIO) -> int:
    only = args.research_class
    known = q.known_classes()
    if only and only not in known:
        raise InputError(f"unknown research class {only!r} (known: {', '.join(known) or 'none'})")
    # Reap first, so items of dead workers show as requeued rather than running forever.
    q.reap([only] if only else known)
    snap = q.snapshot(only)
    if args.json:
        json.dump(status_json(snap), out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(render_table(snap, limit=args.limit, now_ms=int(time.time() * 1000)))
    return EXIT_OK


def status_json(snap: Snapshot) -> dict[str, Any]:
    counts = count_by_class(snap.classes, snap.items)
    classes = {
        name: {**c.as_json(), "registered": name in snap.registered} for name, c in counts.items()
    }
    items = sorted(snap.items, key=lambda i: (i.created_ms, i.id))
    return {"classes": classes, "items": [i.as_json() for i in items]}


def _age(ms: int, now_ms: int) -> str:
    if not ms:
        return "-"
    s = max(0, (now_ms - ms) // 1000)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h" if s < 172800 else f"{s // 86400}d"


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _order(i: Item) -> tuple[int, int]:
    """Running first, then waiting, then finished; newest first inside each group."""
    group = 0 if i.state == RUNNING else 2 if i.state in TERMINAL else 1
    return group, -i.updated_ms


def render_table(snap: Snapshot, *, limit: int, now_ms: int) -> str:
    counts = count_by_class(snap.classes, snap.items)
    head = ["CLASS", "QUEUED", "RUNNING", "REQUEUED", "DONE", "DEAD", "CANCELLED"]
    head += ["PREEMPTED", "LOST", "FAILED", "GPU-H"]
    rows = [head]
    for name, c in counts.items():
        mark = "" if name in snap.registered else " (unregistered)"
        rows.append(
            [name + mark]
            + [str(v) for v in (c.queued, c.running, c.requeued, c.done, c.dead, c.cancelled)]
            + [str(c.preemptions), str(c.lost), str(c.failures), f"{c.gpu_ms / 3.6e6:.2f}"]
        )
    lines = _table(rows, right=set(range(1, len(head))))
    items = sorted(snap.items, key=_order)
    shown = items if limit <= 0 else items[:limit]
    if shown:
        rows = [["ITEM", "CLASS", "STATE", "ATTEMPT", "FAILED", "PREEMPTED", "LOST"]]
        rows[0] += ["GPU-S", "AGE", "SUBMITTER", "LAST ERROR"]
        for i in shown:
            state = i.state + ("*" if i.cancel_requested and i.state == RUNNING else "")
            rows.append(
                [
                    i.id,
                    i.research_class,
                    state,
                    str(i.attempts),
                    f"{i.failures}/{i.max_attempts}",
                    str(i.preemptions),
                    str(i.lost),
                    f"{i.gpu_seconds:.1f}",
                    _age(i.created_ms, now_ms),
                    i.submitter[:20],
                    _one_line(i.last_error, 60),
                ]
            )
        lines += ["", *_table(rows, right={3, 4, 5, 6, 7, 8})]
        if len(shown) < len(items):
            lines.append(f"... {len(items) - len(shown)} more items (--limit 0 shows all)")
        if any(i.cancel_requested and i.state == RUNNING for i in shown):
            lines.append("* cancel requested: the worker stops it at its next heartbeat")
    done = sum(1 for i in snap.items if i.state == DONE)
    lines.append(f"\n{len(snap.items)} items, {done} done")
    return "\n".join(lines) + "\n"


def _one_line(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise InputError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpu-pool-scaler research", description="research work queue")
    sub = p.add_subparsers(dest="research_cmd_name", required=True, parser_class=_Parser)
    add_subcommands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (the same commands as `gpu-pool-scaler research`)."""
    try:
        args = build_parser().parse_args(argv)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
