"""Sample recordings shipped with the package, so examples and tests run from any directory."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["sample"]


def sample(name: str) -> Path:
    """The path of a shipped sample file, e.g. ``sample("v0_missing_test_file.traj")``."""
    path = Path(str(files(__package__).joinpath(name)))
    if not path.is_file():
        known = sorted(p.name for p in Path(str(files(__package__))).iterdir() if not p.name.startswith("_"))
        raise FileNotFoundError(f"no sample {name!r}; shipped: {known}")
    return path
