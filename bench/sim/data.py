"""Where the shared, read-only data lives: ../shared next to the repository, or
$GPU_POOL_SCALER_SHARED, or /work/shared. Fails loudly when none has the files.
The one place that knows it: the simulator, the load bench and the tests all ask here."""

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
        if all((c / d).is_dir() for d in ("traces", "profiles", "fixtures")):
            return c
    raise FileNotFoundError(
        "shared data (traces/, profiles/, fixtures/) not found in "
        + ", ".join(str(c) for c in cands)
        + "; set GPU_POOL_SCALER_SHARED"
    )
