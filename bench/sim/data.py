"""Where the shared, read-only data lives: ../shared next to the repository, or
$GPU_POOL_SCALER_SHARED, or /work/shared. Fails loudly when none has the files."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


@cache
def shared_dir() -> Path:
    env = os.environ.get("GPU_POOL_SCALER_SHARED")
    cands = ([Path(env)] if env else []) + [_REPO.parent / "shared", Path("/work/shared")]
    for c in cands:
        if (c / "traces").is_dir() and (c / "profiles").is_dir():
            return c
    raise FileNotFoundError(
        "shared data (traces/, profiles/) not found in "
        + ", ".join(str(c) for c in cands)
        + "; set GPU_POOL_SCALER_SHARED"
    )
