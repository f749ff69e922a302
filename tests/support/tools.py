"""Real tools the tests run, installed by the repo's own scripts (never skipped)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.paths import REPO


def ensure_tool(script: str, timeout: float) -> str:
    """Run `tools/<script>` (installs or builds the tool if missing) and return the path it
    prints last; fail the test loudly when it cannot."""
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / script)], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        pytest.fail(f"tools/{script} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]
