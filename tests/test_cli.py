"""The installed command lines reach the research queue (`gpu-pool-scaler research`,
`gpu-pool-worker`) against a real redis-server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redisserver import RedisServer, running_redis


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path)


def scaler_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scaler", *args], capture_output=True, text=True, timeout=60
    )


def test_research_subcommands_through_the_main_cli(redis_server: RedisServer) -> None:
    u = redis_server.url
    assert scaler_cli("research", "classes", "--redis", u, "--add", "eval").returncode == 0
    sub = scaler_cli("research", "submit", "--redis", u, "--class", "eval", "--param", "K=v")
    assert sub.returncode == 0, sub.stderr
    item = sub.stdout.strip()
    st = scaler_cli("research", "status", "--redis", u, "--json")
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert doc["classes"]["eval"]["queued"] == 1 and doc["items"][0]["id"] == item
    bad = scaler_cli("research", "submit", "--redis", u, "--class", "nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nope" in bad.stderr


def test_worker_console_script_is_installed() -> None:
    worker = Path(sys.executable).parent / "gpu-pool-worker"
    proc = subprocess.run([str(worker), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--class" in proc.stdout
