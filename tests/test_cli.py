"""The installed command lines reach the research queue (`gpu-pool-scaler research`,
`gpu-pool-worker`) against a real redis-server."""

from __future__ import annotations

import json
import os
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


def test_serve_without_kubernetes_credentials_says_what_needs_them(tmp_path: Path) -> None:
    """A config that writes its state to a ConfigMap, run where no API is reachable: one
    line naming the keys that need the API and what to set, exit 2, no traceback."""
    from tests.support.scaler import write_config

    path = write_config(tmp_path / "pool.yaml", ["127.0.0.1:9"])
    cfg = path.read_text() + "server:\n  stateConfigMap: gpu-pool/scaler-state\n"
    path.write_text(cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "missing-kubeconfig")
    proc = subprocess.run(
        [sys.executable, "-m", "scaler", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "server.stateConfigMap" in proc.stderr and "KUBECONFIG" in proc.stderr, proc.stderr
