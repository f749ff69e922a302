"""A real redis-server for tests: own process, free 127.0.0.1 port, temp dir, no system service.

A missing binary FAILS the test (never skips): install it with `apt-get install redis-server`.
Use `running_redis(tmp_path)` from a fixture:

    @pytest.fixture
    def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
        yield from running_redis(tmp_path)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scaler.research.queue import WorkQueue
from scaler.research.redisconn import connect


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        pytest.fail(
            "redis-server not found on PATH: these tests need a real Redis "
            "(Debian/Ubuntu: apt-get install -y redis-server)",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """redis-server on 127.0.0.1. `persistent`: AOF with appendfsync always (every
    acknowledged write is on disk before the reply), so a SIGKILL loses nothing."""

    def __init__(self, workdir: Path, *, password: str | None = None, persistent: bool = False):
        self.binary = redis_binary()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.password = password
        self.persistent = persistent
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        cred = f":{self.password}@" if self.password else ""
        return f"redis://{cred}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            decode_responses=True,
            socket_timeout=5,
        )

    def _argv(self) -> list[str]:
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            "--daemonize", "no",
            "--save", "",
        ]  # fmt: skip
        if self.persistent:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        return argv

    def start(self, *, same_port: bool = False) -> None:
        last = ""
        for _ in range(5):  # a free port can be taken between probing and binding
            if not same_port or not self.port:
                self.port = free_port()
            self.proc = subprocess.Popen(
                self._argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            if self._wait_ready(10.0):
                return
            last = self._log_tail()
            self._terminate(signal.SIGKILL)
            if same_port:
                time.sleep(0.2)
        raise RuntimeError(f"redis-server did not start:\n{last}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                c = self.client()
                try:
                    if c.ping():
                        return True
                finally:
                    c.close()
            except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
                pass
            time.sleep(0.02)
        return False

    def _log_tail(self) -> str:
        try:
            return "\n".join((self.dir / "redis.log").read_text().splitlines()[-20:])
        except OSError:
            return "(no redis.log)"

    def _terminate(self, sig: int) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def restart(self, *, kill: bool = True) -> float:
        """Stop (SIGKILL by default: a crash) and start again on the same port and data.
        Returns how long Redis was unreachable, in seconds."""
        t0 = time.monotonic()
        self._terminate(signal.SIGKILL if kill else signal.SIGTERM)
        self.start(same_port=True)
        self.restarts += 1
        return time.monotonic() - t0

    def stop(self) -> None:
        self._terminate(signal.SIGTERM)


def running_redis(
    workdir: Path, *, password: str | None = None, persistent: bool = False
) -> Iterator[RedisServer]:
    server = RedisServer(workdir / "redis", password=password, persistent=persistent)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def registered_queue(server: RedisServer, classes: list[str]) -> Iterator[WorkQueue]:
    """A WorkQueue on `server` with `classes` registered; for a fixture:
    `yield from registered_queue(redis_server, ["eval"])`."""
    client = connect(server.url)
    q = WorkQueue(client)
    q.update_classes(add=classes)
    try:
        yield q
    finally:
        client.close()
