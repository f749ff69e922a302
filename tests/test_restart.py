"""A restart keeps the policy's memory: the real `gpu-pool-scaler serve` process is stopped
mid scale-down and started again; its gRPC answers and `explain` show the stabilization
window and the learned batch carried over (server.stateFile). Control: the same restart
without the saved state starts from the replicas that exist, as before."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.support.exposition import ExpositionServer, vllm_exposition
from tests.support.scaler import ask_once, write_config
from tests.test_app import _serve

STABILIZATION_S = 600


def _port(proc: subprocess.Popen[str], lines: list[str]) -> int:
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"gRPC on [\d.]+:(\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError("serve did not start:\n" + "".join(lines))


def _ask(port: int) -> int:
    return ask_once(port, service="chat")


def _stop(proc: subprocess.Popen[str], lines: list[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(lines) + out
    return "".join(lines) + out


def _explain(path: Path) -> str:
    return subprocess.run(
        [sys.executable, "-m", "scaler", "explain", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def _wait(pred: Callable[[], bool], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def test_restart_keeps_stabilization_window_and_learned_batch(
    tmp_path: Path, exposition_server: Callable[[str], ExpositionServer]
) -> None:
    target = exposition_server(vllm_exposition(waiting=40, running=10, kv=0.5))
    path = write_config(
        tmp_path / "pool.yaml",
        [target.address],
        scaleDown={"stabilizationSeconds": STABILIZATION_S, "stepSeconds": 0},
    )
    state = tmp_path / "state" / "scaler.json"
    cfg = yaml.safe_load(path.read_text())
    cfg["server"] = {"stateFile": str(state), "stateWriteSeconds": 1}
    path.write_text(yaml.safe_dump(cfg))

    # 1. A surge: 40 waiting on one replica -> 8 replicas; the batch (10/replica) is learned.
    lines: list[str] = []
    proc = _serve(path)
    port = _port(proc, lines)
    _wait(lambda: _ask(port) == 8)
    # 2. The surge is over: every signal asks 1, the target holds 8 in the 600-s window.
    target.set(vllm_exposition(waiting=0, running=2, kv=0.1))
    time.sleep(3)
    assert _ask(port) == 8
    out = _stop(proc, lines)
    assert "no saved state" in out
    assert state.exists()

    # 3. Restarted: it still answers 8 and is still inside the same window.
    lines = []
    proc = _serve(path)
    try:
        port = _port(proc, lines)
        assert _ask(port) == 8
        text = _explain(path)
        m = re.search(r"hold 8: every signal below 8 for (\d+) s of 600 s stabilization", text)
        assert m, text
        assert int(m.group(1)) >= 3  # counted from before the restart, not from zero
        assert "batch 10/replica" in text  # learned before the restart
    finally:
        out = _stop(proc, lines)
    assert "state restored" in out and "policy memory of 1 service(s)" in out

    # Control: the same restart without the saved state starts over from what exists.
    state.unlink()
    lines = []
    proc = _serve(path)
    try:
        port = _port(proc, lines)
        assert _ask(port) == 1
        assert "batch" not in _explain_without_state(path, tmp_path)
    finally:
        _stop(proc, lines)


def _explain_without_state(path: Path, tmp_path: Path) -> str:
    cfg = yaml.safe_load(path.read_text())
    cfg["server"] = {}
    other = tmp_path / "no-state.yaml"
    other.write_text(yaml.safe_dump(cfg))
    return _explain(other)
