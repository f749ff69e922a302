"""gpu-pool-worker: the process inside a research Job. Takes items of one class and runs them.

    gpu-pool-worker --redis URL --class NAME [--checkpoint-root DIR]
                    (--scaler HOST:PORT [--scaler-ca F --scaler-cert F --scaler-key F] |
                     --no-scaler-check) -- COMMAND ARGS...

Loop: ask the scaler for the class's slots (fail closed) -> lease one item if live leases <
slots -> run COMMAND with the item's parameters as environment variables plus GPS_ITEM_ID,
GPS_ATTEMPT, GPS_CHECKPOINT_DIR, GPS_RESEARCH_CLASS -> heartbeat while it runs -> report
done / failed / preempted -> next item. Exits when the class's queue is empty, so the KEDA
Job ends and its GPUs go back to the pool.

Exit codes: 0 queue empty, no slot, scaler gave no answer (fail closed) or --max-items
reached; 1 internal error; 2 usage or configuration error (flags, unknown class, Redis
credentials, unreadable TLS files); 3 Redis unreachable for --redis-retry-seconds;
143 / 130 stopped by SIGTERM / SIGINT (the item in hand was returned to the queue).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypeVar

import redis

from scaler.research.model import (
    OUTCOME_CANCELLED,
    OUTCOME_DONE,
    OUTCOME_FAILED,
    OUTCOME_PREEMPTED,
    InputError,
    Item,
    check_class_name,
    new_token,
    redact_url,
)
from scaler.research.queue import DEFAULT_PREFIX, Lease, UnknownClassError, WorkQueue
from scaler.research.redisconn import TRANSIENT_ERRORS, connect, describe, is_auth_error
from scaler.research.slots import (
    DEFAULT_TIMEOUT_S,
    GrpcSlotChecker,
    ScalerEndpoint,
    SlotChecker,
    SlotCheckError,
)

log = logging.getLogger("gpu-pool-worker")

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_REDIS = 3
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

# Never handed to the command: the Redis credentials (the chart sets them from a Secret).
_SECRET_ENV = ("GPS_REDIS_URL", "GPS_REDIS_PASSWORD", "GPS_REDIS_USERNAME")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DEFAULT_GRACE_S = 580.0  # the chart's terminationGracePeriodSeconds is 600: keep 20 s to report
_STDERR_TAIL = 20

T = TypeVar("T")


class RedisGaveUp(Exception):
    pass


class ConfigProblem(Exception):
    pass


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    research_class: str
    command: Sequence[str]
    checkpoint_root: Path
    worker_id: str
    lease_s: float = 30.0
    grace_s: float = _DEFAULT_GRACE_S
    gpus: int = 0  # 0: each item's own `gpus`
    max_items: int = 0  # 0: until the queue is empty
    redis_retry_s: float = 60.0

    @property
    def heartbeat_s(self) -> float:
        # Three renewals per lease: one lost heartbeat (a Redis restart, a GC pause) is fine.
        return self.lease_s / 3

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)


def command_env(
    base: Mapping[str, str], item: Item, checkpoint_dir: Path, research_class: str
) -> dict[str, str]:
    """The command's environment: ours minus secrets, plus the item's parameters and GPS_*."""
    env = {k: v for k, v in base.items() if k not in _SECRET_ENV}
    env.update(item.params)
    env.update(
        GPS_ITEM_ID=item.id,
        GPS_ATTEMPT=str(item.attempts),
        GPS_CHECKPOINT_DIR=str(checkpoint_dir),
        GPS_RESEARCH_CLASS=research_class,
    )
    return env


def checkpoint_dir_for(root: Path, research_class: str, item_id: str) -> Path:
    """Same directory for every attempt of an item, so a new attempt resumes the last one."""
    if not _SAFE_ID.match(item_id):
        raise ValueError(f"unsafe item id {item_id!r}")
    return root / research_class / item_id


class _StderrTail:
    """Copies the command's stderr to ours and keeps the last lines for the item's last_error."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._stream = stream
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        for raw in iter(self._stream.readline, b""):
            if out is not None:
                try:
                    out.write(raw)
                    out.flush()
                except (OSError, ValueError):
                    out = None
            text = raw.decode("utf-8", "replace").strip()
            if text:
                self.lines.append(text)

    def last(self, wait_s: float = 1.0) -> str:
        # Children of the command may keep the pipe open: do not wait for them.
        self._thread.join(wait_s)
        return self.lines[-1] if self.lines else ""


class Worker:
    def __init__(
        self,
        queue: WorkQueue,
        opts: WorkerOptions,
        slots: SlotChecker | None,
        *,
        environ: Mapping[str, str] | None = None,
        redis_url: str = "",
    ) -> None:
        self.queue = queue
        self._url = redis_url  # only ever shown through describe(), which redacts it
        self.opts = opts
        self.slots = slots  # None: --no-scaler-check
        self._environ = dict(os.environ if environ is None else environ)
        self.stop_signal: int | None = None
        self._stop_at = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self.items_taken = 0
        self._extra = {"research_class": opts.research_class}

    # ------------------------------------------------------------------ signals

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        """Record the stop and forward SIGTERM to the command's process group at once: the
        command's checkpoint time starts now, not at our next poll. No logging here (a
        handler may interrupt a log write); the loop logs when it notices."""
        if self.stop_signal is None:
            self.stop_signal = signum
            self._stop_at = time.monotonic()
        self._signal_command(signal.SIGTERM)

    def _signal_command(self, sig: int) -> None:
        p = self._proc
        if p is not None and p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)

    def _stop_code(self) -> int:
        return EXIT_SIGINT if self.stop_signal == signal.SIGINT else EXIT_SIGTERM

    # ------------------------------------------------------------------ Redis calls

    def _redis(self, what: str, fn: Callable[[], T]) -> T:
        """Call Redis, retrying transient errors for up to --redis-retry-seconds. Every
        script is idempotent for a repeated call (tokens), so a retry is always safe."""
        deadline = time.monotonic() + self.opts.redis_retry_s
        delay = 0.05
        warned = 0.0
        while True:
            try:
                return fn()
            except TRANSIENT_ERRORS as e:
                if is_auth_error(e):
                    raise ConfigProblem(describe(e, self._url)) from None
                now = time.monotonic()
                if now >= deadline:
                    raise RedisGaveUp(f"{what}: {describe(e, self._url)}") from None
                if now - warned >= 5.0:
                    log.warning(
                        "%s: Redis unavailable, retrying: %s",
                        what,
                        describe(e, self._url),
                        extra=self._extra,
                    )
                    warned = now
                time.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, 1.0)
            except Exception as e:
                if is_auth_error(e):
                    raise ConfigProblem(describe(e, self._url)) from None
                raise

    # ------------------------------------------------------------------ main loop

    def run(self) -> int:
        cls = self.opts.research_class
        try:
            self._redis("check class", lambda: self.queue.require_class(cls))
            return self._loop()
        except (UnknownClassError, ConfigProblem) as e:
            log.error("%s", e, extra=self._extra)
            return EXIT_USAGE
        except RedisGaveUp as e:
            log.error("giving up: %s", e, extra=self._extra)
            return EXIT_REDIS

    def _loop(self) -> int:
        cls = self.opts.research_class
        while True:
            if self.stop_signal is not None:
                log.info(
                    "stopping on signal %d with no item in hand",
                    self.stop_signal,
                    extra=self._extra,
                )
                return self._stop_code()
            if self.opts.max_items and self.items_taken >= self.opts.max_items:
                log.info(
                    "took %d items (--max-items): exiting", self.items_taken, extra=self._extra
                )
                return EXIT_OK
            slots: int | None = None
            if self.slots is not None:
                try:
                    slots = self.slots.slots(cls)
                except SlotCheckError as e:
                    log.warning(
                        "no slot answer from the scaler, taking nothing (fail closed): %s",
                        e,
                        extra=self._extra,
                    )
                    return EXIT_OK
                if slots <= 0:
                    log.info(
                        "scaler grants 0 slots to class %s: taking nothing", cls, extra=self._extra
                    )
                    return EXIT_OK
            take = functools.partial(
                self.queue.take,
                cls,
                token=new_token(),  # one token for all retries: a retried take is the same take
                worker=self.opts.worker_id,
                lease_ms=self.opts.lease_ms,
                slots=slots,
                gpus=self.opts.gpus,
            )
            res = self._redis("take", take)
            if res.status == "full":
                log.info(
                    "class %s already holds %d leases for %s slots: taking nothing",
                    cls,
                    res.live_leases,
                    slots,
                    extra=self._extra,
                )
                return EXIT_OK
            if res.status == "empty":
                log.info("queue of class %s is empty: exiting", cls, extra=self._extra)
                return EXIT_OK
            if res.lease is None:
                log.warning("take answered %r; trying again", res.status, extra=self._extra)
                continue
            self.items_taken += 1
            self._work(res.lease, slots)
            if self.stop_signal is not None:
                return self._stop_code()

    def _work(self, lease: Lease, slots: int | None) -> None:
        item = lease.item
        extra = {**self._extra, "fields": {"item": item.id, "attempt": item.attempts}}
        ckdir = checkpoint_dir_for(self.opts.checkpoint_root, self.opts.research_class, item.id)
        log.info(
            "took item %s attempt %d (failures %d/%d, preemptions %d, lost %d; class slots %s), "
            "checkpoint dir %s",
            item.id,
            item.attempts,
            item.failures,
            item.max_attempts,
            item.preemptions,
            item.lost,
            "unchecked" if slots is None else slots,
            ckdir,
            extra=extra,
        )
        if self.stop_signal is not None:  # the signal came during the take
            self._report(lease, OUTCOME_PREEMPTED, "", ckdir, extra, 0.0)
            return
        t_lease = time.monotonic()  # conservative: the lease was set before this instant
        try:
            ckdir.mkdir(parents=True, exist_ok=True)
            env = command_env(self._environ, item, ckdir, self.opts.research_class)
            # Own process group: SIGTERM reaches the command's children too.
            self._proc = subprocess.Popen(
                list(self.opts.command),
                env=env,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                process_group=0,
            )
        except OSError as e:
            self._proc = None
            err = f"cannot start command {self.opts.command[0]!r}: {e.strerror or e}"
            log.error("%s", err, extra=extra)
            self._report(lease, OUTCOME_FAILED, err, ckdir, extra, 0.0)
            return
        proc = self._proc
        assert proc.stderr is not None
        tail = _StderrTail(proc.stderr)
        if self.stop_signal is not None:  # signal between take and start
            self._signal_command(signal.SIGTERM)
        log.info("command started, pid %d", proc.pid, extra=extra)
        try:
            rc, cancelled, fenced = self._supervise(lease, proc, t_lease, extra)
        finally:
            # Whatever ends supervision (even a bug), no command runs on without a lease.
            if proc.poll() is None:
                self._signal_command(signal.SIGKILL)
                proc.wait()
            self._proc = None
        elapsed = time.monotonic() - t_lease
        if fenced:
            return  # not ours any more: nothing to report, the reaper settles the attempt
        if rc == 0:
            outcome, err = OUTCOME_DONE, ""
        elif cancelled:
            outcome, err = OUTCOME_CANCELLED, ""
        elif self.stop_signal is not None:
            outcome, err = OUTCOME_PREEMPTED, ""
        else:
            how = (
                f"killed by {signal.Signals(-rc).name}"
                if rc < 0 and -rc in signal.valid_signals()
                else f"exit code {rc}"
            )
            last = tail.last()
            err = f"command {how}" + (f": {last}" if last else "")
            outcome = OUTCOME_FAILED
        self._report(lease, outcome, err, ckdir, extra, elapsed)

    def _supervise(
        self,
        lease: Lease,
        proc: subprocess.Popen[bytes],
        t_lease: float,
        extra: dict[str, Any],
    ) -> tuple[int, bool, bool]:
        """Wait for the command while renewing the lease. Returns (rc, cancelled, fenced)."""
        hb = self.opts.heartbeat_s
        valid_until = t_lease + self.opts.lease_s
        next_hb = t_lease + hb
        kill_at: float | None = None  # grace deadline after a SIGTERM we sent
        cancelled = fenced = noticed_stop = False
        failing_since: float | None = None
        while True:
            try:
                rc = proc.wait(timeout=0.05)
                return rc, cancelled, fenced
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if self.stop_signal is not None and not noticed_stop:
                noticed_stop = True
                kill_at = min(kill_at or float("inf"), self._stop_at + self.opts.grace_s)
                log.info(
                    "received signal %d: SIGTERM forwarded to the command, waiting up to "
                    "%.0f s for it to checkpoint",
                    self.stop_signal,
                    self.opts.grace_s,
                    extra=extra,
                )
            if kill_at is not None and now >= kill_at:
                log.warning("grace period over: SIGKILL to the command", extra=extra)
                self._signal_command(signal.SIGKILL)
                kill_at = float("inf")
            if fenced:
                continue
            if now >= next_hb:
                next_hb = now + hb
                try:
                    answer = self.queue.heartbeat(lease, self.opts.lease_ms)
                except redis.exceptions.RedisError as e:
                    # Any error is "no renewal"; fencing below stops the command in time.
                    answer = "unreachable"
                    if failing_since is None:
                        failing_since = now
                        log.warning(
                            "heartbeat failed, will retry: %s", describe(e, self._url), extra=extra
                        )
                if answer in ("ok", "cancel"):
                    valid_until = now + self.opts.lease_s
                    if failing_since is not None:
                        log.info(
                            "heartbeat ok again after %.1f s", now - failing_since, extra=extra
                        )
                        failing_since = None
                if answer == "cancel" and not cancelled:
                    cancelled = True
                    log.info("item cancelled: SIGTERM to the command", extra=extra)
                    self._signal_command(signal.SIGTERM)
                    kill_at = min(kill_at or float("inf"), now + self.opts.grace_s)
                if answer == "lost":
                    log.error(
                        "lease lost (reaped after expiry; another worker may run the "
                        "item): SIGKILL to the command",
                        extra=extra,
                    )
                    self._signal_command(signal.SIGKILL)
                    fenced = True
                    continue
            # Fencing: stop before the lease can expire, or a second worker could take the
            # item while this command still writes its checkpoint.
            if now >= valid_until - hb / 2:
                log.error(
                    "could not renew the lease for %.1f s: SIGKILL to the command so no "
                    "two workers run the item",
                    now - (valid_until - self.opts.lease_s),
                    extra=extra,
                )
                self._signal_command(signal.SIGKILL)
                fenced = True

    def _report(
        self,
        lease: Lease,
        outcome: str,
        err: str,
        ckdir: Path,
        extra: dict[str, Any],
        elapsed: float,
    ) -> None:
        r = self._redis(
            "report " + outcome,
            lambda: self.queue.finish(lease, outcome, error=err, checkpoint=str(ckdir)),
        )
        item = lease.item
        if r.status == "duplicate":
            log.warning("completion refused as a duplicate: %s", r.detail, extra=extra)
        elif r.status != "ok":
            log.warning(
                "could not report %s: %s (item is %s)",
                outcome,
                r.status,
                r.detail or "?",
                extra=extra,
            )
        elif outcome == OUTCOME_DONE:
            log.info("item done after %.1f s (attempt %d)", elapsed, item.attempts, extra=extra)
        elif outcome == OUTCOME_PREEMPTED:
            log.info(
                "item returned to the queue (preempted, not a failure) with checkpoint %s",
                ckdir,
                extra=extra,
            )
        elif outcome == OUTCOME_CANCELLED:
            log.info("item cancelled", extra=extra)
        elif r.detail == "dead":
            log.error(
                "%s; failure %d of %d: dead-lettered",
                err,
                item.failures + 1,
                item.max_attempts,
                extra=extra,
            )
        else:
            log.warning(
                "%s; failure %d of %d: item %s",
                err,
                item.failures + 1,
                item.max_attempts,
                r.detail,
                extra=extra,
            )


# ---------------------------------------------------------------------- command line


class _Formatter(logging.Formatter):
    """JSON lines inside Kubernetes, text elsewhere; context from `extra` like scaler.logs."""

    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        ctx: dict[str, Any] = {}
        if hasattr(record, "research_class"):
            ctx["research_class"] = record.research_class
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            ctx.update(fields)
        if self.as_json:
            out = {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                + f".{int(record.msecs):03d}Z",
                "level": record.levelname.lower(),
                "logger": record.name,
                "msg": record.getMessage(),
                **ctx,
            }
            return json.dumps(out, default=str)
        t = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{t} {record.levelname:<7} {record.name}[{os.getpid()}]: {record.getMessage()}"
        if ctx:
            line += "  [" + " ".join(f"{k}={v}" for k, v in ctx.items()) + "]"
        return line


def setup_logging(fmt: str, level: str) -> None:
    if fmt == "auto":
        fmt = "json" if os.environ.get("KUBERNETES_SERVICE_HOST") else "text"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(fmt == "json"))
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (argparse prints usage too)
        raise InputError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gpu-pool-worker",
        description="Run research work items of one class (inside a KEDA research Job).",
        epilog="Exit codes: 0 queue empty / no slot / scaler silent (fail closed); 1 internal "
        "error; 2 usage or configuration error; 3 Redis unreachable; 143 SIGTERM (item "
        "returned to the queue); 130 SIGINT.",
    )
    env = os.environ.get
    p.add_argument(
        "--redis",
        default=env("GPS_REDIS_URL"),
        help="redis://[:password@]host:port/db (default: $GPS_REDIS_URL, which "
        "keeps the password off the command line)",
    )
    p.add_argument("--class", dest="research_class", required=True, help="research class")
    p.add_argument(
        "--checkpoint-root",
        default=env("GPS_CHECKPOINT_ROOT", "/checkpoints"),
        help="shared volume; the command gets <root>/<class>/<item id> "
        "(default: $GPS_CHECKPOINT_ROOT or /checkpoints)",
    )
    s = p.add_argument_group("scaler check (fail closed)")
    s.add_argument(
        "--scaler",
        default=env("GPS_SCALER_ADDRESS"),
        help="scaler gRPC address HOST:PORT (default: $GPS_SCALER_ADDRESS)",
    )
    s.add_argument("--scaler-tls", action="store_true", help="TLS with the system CA roots")
    s.add_argument("--scaler-ca", help="CA bundle (PEM) that signed the scaler's certificate")
    s.add_argument("--scaler-cert", help="client certificate (PEM), for mTLS")
    s.add_argument("--scaler-key", help="client private key (PEM), for mTLS")
    s.add_argument("--scaler-server-name", help="name expected in the scaler's certificate")
    s.add_argument("--scaler-pool", help="send metadata pool=NAME (the scaler checks it)")
    s.add_argument("--scaler-timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds")
    s.add_argument(
        "--no-scaler-check",
        action="store_true",
        help="take items without asking the scaler (runs without a scaler only)",
    )
    t = p.add_argument_group("timing")
    t.add_argument(
        "--lease-seconds",
        type=float,
        default=30.0,
        help="lease TTL; renewed every third of it (default 30)",
    )
    t.add_argument(
        "--grace-seconds",
        type=float,
        default=_DEFAULT_GRACE_S,
        help="after SIGTERM, how long the command may take to checkpoint before "
        "SIGKILL; keep it under the pod's terminationGracePeriodSeconds "
        f"(default {_DEFAULT_GRACE_S:.0f})",
    )
    t.add_argument(
        "--redis-retry-seconds",
        type=float,
        default=60.0,
        help="keep retrying an unreachable Redis this long, then exit 3",
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=0,
        help="GPUs this worker holds, for GPU-seconds (default: the item's gpus)",
    )
    p.add_argument("--max-items", type=int, default=0, help="exit after N items (0: no limit)")
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help="Redis key prefix (default gps)")
    p.add_argument("--log-format", choices=("auto", "json", "text"), default="auto")
    p.add_argument("--log-level", default="INFO")
    return p


def _options(args: argparse.Namespace, command: list[str]) -> WorkerOptions:
    if not args.redis:
        raise InputError("--redis URL is required (or set GPS_REDIS_URL)")
    check_class_name(args.research_class)
    if not command:
        raise InputError("no command: put it after `--` (gpu-pool-worker ... -- COMMAND ARGS)")
    if args.scaler and args.no_scaler_check:
        raise InputError("--scaler and --no-scaler-check exclude each other")
    if not args.scaler and not args.no_scaler_check:
        raise InputError(
            "--scaler HOST:PORT is required (the fail-closed slot check); "
            "--no-scaler-check only for runs without a scaler"
        )
    if args.lease_seconds < 0.5 or args.grace_seconds < 0 or args.redis_retry_seconds < 0:
        raise InputError("--lease-seconds must be >= 0.5, other durations >= 0")
    if args.gpus < 0 or args.max_items < 0:
        raise InputError("--gpus and --max-items must be >= 0")
    return WorkerOptions(
        research_class=args.research_class,
        command=command,
        checkpoint_root=Path(args.checkpoint_root),
        worker_id=f"{socket.gethostname()}/{os.getpid()}",
        lease_s=args.lease_seconds,
        grace_s=args.grace_seconds,
        gpus=args.gpus,
        max_items=args.max_items,
        redis_retry_s=args.redis_retry_seconds,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    flags, command = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(flags)
        opts = _options(args, command)
        setup_logging(args.log_format, args.log_level)
        client = connect(args.redis, timeout_s=min(5.0, max(0.2, args.lease_seconds / 4)))
        checker: SlotChecker | None = None
        if not args.no_scaler_check:
            checker = GrpcSlotChecker(
                ScalerEndpoint(
                    address=args.scaler,
                    tls=args.scaler_tls,
                    ca_file=args.scaler_ca,
                    cert_file=args.scaler_cert,
                    key_file=args.scaler_key,
                    server_name=args.scaler_server_name,
                    timeout_s=args.scaler_timeout,
                    pool=args.scaler_pool,
                )
            )
    except InputError as e:
        print(f"gpu-pool-worker: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return int(e.code or 0) if isinstance(e.code, int) else EXIT_USAGE
    worker = Worker(WorkQueue(client, args.prefix), opts, checker, redis_url=args.redis)
    worker.install_signal_handlers()
    log.info(
        "worker %s for class %s on %s, scaler check %s",
        opts.worker_id,
        opts.research_class,
        redact_url(args.redis),
        "off" if checker is None else args.scaler,
        extra=worker._extra,
    )
    try:
        return worker.run()
    except Exception:
        log.exception("internal error", extra=worker._extra)
        return EXIT_INTERNAL
    finally:
        # The run is over and its exit code decided; a SIGTERM from here on (the pod being
        # deleted while we exit) must not turn it into "killed by SIGTERM": the interpreter
        # restores the default handler while it shuts down, so block the signal instead.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        if checker is not None:
            checker.close()
        client.close()


if __name__ == "__main__":
    sys.exit(main())
