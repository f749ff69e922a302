"""SGLang's own metric collectors (the `sglang` wheel pinned in tools/sglang_capture.py), run
in the vLLM venv: the `/metrics` text an SGLang server serves, read by the scaler.

An SGLang server cannot run here (no GPU; its CPU kernels need a source build), but its
`/metrics` body is written by these collectors and rendered by prometheus_client's
multiprocess collector: tools/sglang_capture.py does what its processes do. The first run
installs SGLang into .cache/sglang-site (~250 MB, ~20 s) beside the vLLM venv that
tests/test_real_vllm.py builds. Nothing here is skipped: without them this test fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scaler.core.exposition import read_sample
from tests.support.paths import REPO, SGLANG_CAPTURES

PEER = REPO / "tools" / "vllm_peer.py"
CAPTURE = REPO / "tools" / "sglang_capture.py"
VENV_PYTHON = REPO / ".cache" / "vllm-venv" / "bin" / "python"
pytestmark = [pytest.mark.realvllm, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def venv_python() -> str:
    subprocess.run([sys.executable, str(PEER), "build-model"], check=True, timeout=1500)
    return str(VENV_PYTHON)


def _lines(text: str) -> list[str]:
    """The exposition's lines, in order and with the `pid` label's value left out: the
    multiprocess files are read in directory order, and some gauges carry the writer's pid."""
    return sorted(re.sub(r'pid="[0-9]+"', 'pid=""', line) for line in text.splitlines())


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        ([], "metrics.txt"),
        (["--priority-scheduling"], "metrics_priority.txt"),
        (["--dp-size", "2"], "metrics_dp2.txt"),
        (["--pp-size", "2"], "metrics_pp2.txt"),
        (["--tp-size", "2", "--all-schedulers"], "metrics_tp2_all.txt"),
    ],
    ids=[
        "default",
        "priority-scheduling",
        "two-data-parallel-schedulers",
        "two-pipeline-stages",
        "every-tp-rank-logs",
    ],
)
def test_sglang_s_collectors_write_the_vendored_capture(
    venv_python: str, flags: list[str], name: str, tmp_path: Path
) -> None:
    """tests/data/sglang-0.5.23 (read by test_exposition) is what the pinned SGLang writes
    today, and the scaler reads each queue once (the priority breakdown not summed, each
    data-parallel rank's queue summed, one engine's pipeline stages and TP ranks read once)."""
    scratch = tmp_path / "tmp"  # the tool's TMPDIR: its multiprocess directory goes here
    scratch.mkdir()
    run = subprocess.run(
        [venv_python, str(CAPTURE), "--out", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert list(scratch.glob("sglang-metrics-*")) == []  # removed, not left in /tmp
    text = (tmp_path / name).read_text()
    assert _lines(text) == _lines((SGLANG_CAPTURES / name).read_text())
    s = read_sample(text, "sglang", ttft=True, itl=True)
    engines = 2 if "--dp-size" in flags else 1
    assert s is not None and (s.waiting, s.engines) == (7.0 * engines, engines)
    assert s.ttft_buckets is not None and s.ttft_buckets[-1] == (float("inf"), 6.0)
