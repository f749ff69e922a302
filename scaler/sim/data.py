"""The simulator's data: compact copies shipped inside the package (scaler/sim/data/,
see its README for sources, transformations and licences). Nothing outside the package
is read, so the demo and the bench run from a wheel or any clone."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_file(*parts: str) -> Path:
    """Path of a vendored data file; fails loudly naming it if the package lacks it."""
    path = Path(str(resources.files("scaler.sim").joinpath("data", *parts)))
    if not path.is_file():
        raise FileNotFoundError(f"simulator data file missing from the package: {path}")
    return path
