"""The wheel is the product only: one top-level package, the simulator's data inside it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.paths import REPO


def test_wheel_holds_only_the_scaler_package_and_its_data(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("gpu_pool_scaler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"scaler"}, tops  # no bench/, tests/ or tools/ installed
    data = {n for n in names if n.startswith("scaler/sim/data/")}
    vendored = {
        "scaler/sim/data/" + str(p.relative_to(REPO / "scaler" / "sim" / "data"))
        for p in (REPO / "scaler" / "sim" / "data").rglob("*")
        if p.is_file()
    }
    assert vendored and data == vendored  # every vendored file ships, and nothing else
    assert "scaler/py.typed" in names and "scaler/examples/pool.yaml" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    core = [
        ln for ln in text.splitlines() if ln.startswith("Requires-Dist:") and "extra ==" not in ln
    ]
    assert not any("numpy" in ln or "matplotlib" in ln for ln in core), core  # [sim] extra only
