"""Pure data of the research work queue: items, states, input validation. No I/O here.

Everything Redis stores is a string; `Item.from_hash` is the one place that turns an item
hash back into typed fields, so the CLI, the worker and the tests agree on what they read.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Same rule as the scaler config's research[].name (a KEDA trigger's researchClass).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Parameters become environment variables of the command: POSIX names only.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_PARAM_PREFIX = "GPS_"  # the worker's own variables (GPS_ITEM_ID, ...)
MAX_PARAMS = 64
MAX_PARAM_VALUE = 4096
MAX_SUBMITTER = 128

# Item states. Waiting: queued (never started), requeued (waiting again after a preempted,
# lost or failed attempt). Leased: running. Terminal: done, dead, cancelled.
QUEUED = "queued"
RUNNING = "running"
REQUEUED = "requeued"
DONE = "done"
DEAD = "dead"
CANCELLED = "cancelled"
STATES = (QUEUED, RUNNING, REQUEUED, DONE, DEAD, CANCELLED)
TERMINAL = frozenset({DONE, DEAD, CANCELLED})

# How an attempt ended (item field last_outcome, events).
OUTCOME_DONE = "done"
OUTCOME_FAILED = "failed"
OUTCOME_PREEMPTED = "preempted"
OUTCOME_CANCELLED = "cancelled"
OUTCOME_LOST = "lost"  # lease expired: the worker (node) is presumed gone

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_MAX_LOST = 5


class InputError(ValueError):
    """Bad input from a person or a flag: the message is one line, shown as is."""


def check_class_name(name: str) -> str:
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise InputError(
            f"research class {name[:64]!r} is not a DNS label (lowercase letters, digits, '-')"
        )
    return name


def parse_param(raw: str) -> tuple[str, str]:
    """`K=V` -> (K, V). The value may be empty or contain '='; the key may not be empty."""
    key, sep, value = raw.partition("=")
    shown = raw if len(raw) <= 64 else raw[:61] + "..."
    if not sep:
        raise InputError(f"--param {shown!r} is not KEY=VALUE (no '=')")
    if not key:
        raise InputError(f"--param {shown!r} has an empty key")
    if not _ENV_NAME.match(key):
        raise InputError(
            f"--param key {key[:64]!r} is not an environment variable name "
            "(letters, digits, '_'; not starting with a digit)"
        )
    if key.upper().startswith(RESERVED_PARAM_PREFIX):
        raise InputError(f"--param key {key!r} uses the reserved prefix {RESERVED_PARAM_PREFIX}")
    if len(value) > MAX_PARAM_VALUE or "\0" in value:
        raise InputError(
            f"--param {key} value is longer than {MAX_PARAM_VALUE} characters or has a NUL"
        )
    return key, value


def parse_params(raws: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in raws:
        k, v = parse_param(raw)
        if k in out:
            raise InputError(f"--param {k} given twice")
        out[k] = v
    if len(out) > MAX_PARAMS:
        raise InputError(f"at most {MAX_PARAMS} --param, got {len(out)}")
    return out


def new_item_id() -> str:
    # 64 random bits: collisions are refused by the submit script anyway (retry).
    return secrets.token_hex(8)


def new_token() -> str:
    """A lease token: names one attempt; every later call about the attempt must show it."""
    return secrets.token_hex(12)


def redact_url(url: str) -> str:
    """A Redis URL fit for logs and error messages: the password is replaced by ***."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable Redis URL>"
    if parts.password is None and "@" not in parts.netloc:
        return url
    user = urllib.parse.unquote(parts.username or "")
    cred = f"{user}:***@" if parts.password is not None else f"{user}@"
    hostport = f"[{host}]" if ":" in host else host
    if port is not None:
        hostport += f":{port}"
    return urllib.parse.urlunsplit(
        (parts.scheme, cred + hostport, parts.path, parts.query, parts.fragment)
    )


def _int(h: Mapping[str, str], k: str, default: int = 0) -> int:
    try:
        return int(h.get(k, "") or default)
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    research_class: str
    params: dict[str, str] = field(default_factory=dict)
    submitter: str = ""
    state: str = QUEUED
    gpus: int = 1
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_lost: int = DEFAULT_MAX_LOST
    attempts: int = 0  # times taken by a worker (GPS_ATTEMPT of the latest)
    failures: int = 0  # nonzero exits of the command
    preemptions: int = 0  # returned after SIGTERM
    lost: int = 0  # leases that expired (worker/node gone)
    gpu_ms: int = 0  # Σ attempt wall time × GPUs, milliseconds
    checkpoint: str = ""  # checkpoint location of the last attempt
    last_error: str = ""
    last_outcome: str = ""
    worker: str = ""
    cancel_requested: bool = False
    duplicates_refused: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    started_ms: int = 0
    finished_ms: int = 0

    @property
    def gpu_seconds(self) -> float:
        return self.gpu_ms / 1000.0

    @classmethod
    def from_hash(cls, h: Mapping[str, str]) -> Item:
        try:
            params = json.loads(h.get("params") or "{}")
        except ValueError:
            params = {}
        return cls(
            id=h.get("id", ""),
            research_class=h.get("class", ""),
            params={str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else {},
            submitter=h.get("submitter", ""),
            state=h.get("state", ""),
            gpus=_int(h, "gpus", 1),
            max_attempts=_int(h, "max_attempts", DEFAULT_MAX_ATTEMPTS),
            max_lost=_int(h, "max_lost", DEFAULT_MAX_LOST),
            attempts=_int(h, "attempts"),
            failures=_int(h, "failures"),
            preemptions=_int(h, "preemptions"),
            lost=_int(h, "lost"),
            gpu_ms=_int(h, "gpu_ms"),
            checkpoint=h.get("checkpoint", ""),
            last_error=h.get("last_error", ""),
            last_outcome=h.get("last_outcome", ""),
            worker=h.get("worker", ""),
            cancel_requested=h.get("cancel_requested", "") == "1",
            duplicates_refused=_int(h, "dup_refused"),
            created_ms=_int(h, "created_ms"),
            updated_ms=_int(h, "updated_ms"),
            started_ms=_int(h, "started_ms"),
            finished_ms=_int(h, "finished_ms"),
        )

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "class": self.research_class,
            "state": self.state,
            "params": self.params,
            "submitter": self.submitter,
            "gpus": self.gpus,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "failures": self.failures,
            "preemptions": self.preemptions,
            "lost": self.lost,
            "max_lost": self.max_lost,
            "gpu_seconds": round(self.gpu_seconds, 3),
            "checkpoint": self.checkpoint,
            "last_outcome": self.last_outcome,
            "last_error": self.last_error,
            "worker": self.worker,
            "cancel_requested": self.cancel_requested,
            "duplicates_refused": self.duplicates_refused,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
        }


@dataclass(frozen=True, slots=True)
class ClassCounts:
    queued: int = 0
    running: int = 0
    requeued: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0
    gpu_ms: int = 0
    preemptions: int = 0
    lost: int = 0
    failures: int = 0

    @property
    def total(self) -> int:
        return self.queued + self.running + self.requeued + self.done + self.dead + self.cancelled

    def as_json(self) -> dict[str, object]:
        return {
            "queued": self.queued,
            "running": self.running,
            "requeued": self.requeued,
            "done": self.done,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "total": self.total,
            "preemptions": self.preemptions,
            "lost": self.lost,
            "failures": self.failures,
            "gpu_seconds": round(self.gpu_ms / 1000.0, 3),
        }


def count_by_class(classes: Iterable[str], items: Iterable[Item]) -> dict[str, ClassCounts]:
    """Per-class counts; every class in `classes` appears even with no items."""
    acc: dict[str, dict[str, int]] = {c: {} for c in classes}
    for it in items:
        a = acc.setdefault(it.research_class, {})
        if it.state in STATES:
            a[it.state] = a.get(it.state, 0) + 1
        for k, v in (
            ("gpu_ms", it.gpu_ms),
            ("preemptions", it.preemptions),
            ("lost", it.lost),
            ("failures", it.failures),
        ):
            a[k] = a.get(k, 0) + v
    return {c: ClassCounts(**a) for c, a in sorted(acc.items())}
